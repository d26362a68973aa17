"""Bastion's wire: every message on the bus as a msgspec struct, and the subjects they travel on.

This package holds types and names only: no I/O and no service logic.

Schema evolution (every message is msgpack on the bus, JSON at the edges):
- a new field goes last and has a default; a field's type never changes;
- a field is never renamed or reused for another meaning; remove it only after every
  service that reads it is gone;
- internal messages (`Message`) skip unknown fields, so an older service tolerates a newer
  sender; messages an agent or outside client fills (`Ingress`) refuse unknown fields and
  bound every size;
- every message is tagged (`kind`), so unions decode without guessing; a tag never changes.

Each message is imported from its module (`bastion.proto.sandbox`, `bastion.proto.session`,
...); `bastion.proto.schema.MESSAGES` lists them all.
"""
