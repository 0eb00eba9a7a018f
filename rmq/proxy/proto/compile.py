"""``python -m rmq.proxy.proto.compile [OUT]``: compile ``rocketmq_v2.proto`` into a descriptor
set with grpcio-tools' protoc (a test extra; the proxy itself needs only protobuf at run time).

Only our file is in the set (no ``--include_imports``): the well-known types it imports
(Duration, Timestamp) come from the protobuf runtime itself (see ``rmq.proxy.pb``).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from rmq.proxy.proto import DESCRIPTOR_SET_FILE, PROTO_FILE, PROTO_NAME


def compile_descriptor_set(out: Path) -> None:
    """Write the FileDescriptorSet of ``rocketmq_v2.proto`` to ``out`` (raises on a protoc error)."""
    import grpc_tools
    from grpc_tools import protoc

    wkt = Path(grpc_tools.__file__).resolve().parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        # the import path decides the registered file name: lay the file out under PROTO_NAME
        src = Path(tmp) / PROTO_NAME
        src.parent.mkdir(parents=True)
        shutil.copyfile(PROTO_FILE, src)
        rc = protoc.main(["protoc", f"-I{tmp}", f"-I{wkt}", f"--descriptor_set_out={out}", PROTO_NAME])
    if rc != 0:
        raise RuntimeError(f"protoc failed on {PROTO_FILE} (exit {rc})")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else DESCRIPTOR_SET_FILE
    compile_descriptor_set(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
