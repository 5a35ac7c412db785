"""Typed records: the schema registry client, the value formats (Avro, JSON Schema, Protobuf)
behind one seam, the wire-format decoder and its poison reasons, the reader schema pinned per
query and per epoch, and the native extension's loading. Imports only `api`.
"""
