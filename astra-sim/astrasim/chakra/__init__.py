"""Chakra execution traces: schema dataclasses, protoc-generated ``et_def_pb2`` messages and
per-rank ``.et`` files."""
from .et_io import decode_et, encode_et, read_et, read_workload, write_et, write_workload
from .schema import Attr, CollectiveCommType, GlobalMetadata, IOInfo, Node, NodeType

__all__ = ["Attr", "CollectiveCommType", "GlobalMetadata", "IOInfo", "Node", "NodeType",
           "decode_et", "encode_et", "read_et", "read_workload", "write_et", "write_workload"]
