"""LLMServingSim-style request engine reproducing vLLM V1 (0.19 defaults)."""
