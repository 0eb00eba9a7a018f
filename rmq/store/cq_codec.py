"""ConsumeQueue unit encoding, pure (spec 4.1.1): no files, no mappings.

A unit is (commit-log offset int64, message size int32, tag code int64), big-endian.
The store's ConsumeQueue and the Spark rebuild both encode units with these.
"""

from __future__ import annotations

import struct

import numpy as np

CQ_STORE_UNIT_SIZE = 20
CQ_UNIT = struct.Struct(">qiq")
# Size field of the blank units that back-fill a queue starting at a non-zero offset.
BLANK_UNIT_SIZE = 0x7FFFFFFF
BLANK_UNIT = CQ_UNIT.pack(0, BLANK_UNIT_SIZE, 0)
# The same unit as a numpy record, for whole runs of units at once.
CQ_UNIT_DTYPE = np.dtype([("phy_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert CQ_UNIT_DTYPE.itemsize == CQ_STORE_UNIT_SIZE
