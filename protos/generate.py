"""Regenerate lance_spark_ops/_pb/*_pb2.py from protos/*.proto.

Run from the repository root:  python protos/generate.py
Needs grpcio-tools (the `dev` extra). The generated modules are committed; never edit them by hand.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from grpc_tools import protoc
import grpc_tools

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
OUT = ROOT / "lance_spark_ops" / "_pb"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    include = Path(grpc_tools.__file__).parent / "_proto"
    files = sorted(str(p.name) for p in PROTOS.glob("*.proto"))
    args = ["protoc", f"-I{PROTOS}", f"-I{include}", f"--python_out={OUT}", *files]
    if protoc.main(args) != 0:
        return 1
    # protoc emits flat imports ("import file_pb2"); make them package-relative.
    for path in OUT.glob("*_pb2.py"):
        text = path.read_text()
        text = re.sub(r"^import (\w+_pb2) as", r"from . import \1 as", text, flags=re.M)
        path.write_text(text)
    (OUT / "__init__.py").write_text('"""Generated protobuf modules (see protos/generate.py)."""\n')
    return 0


if __name__ == "__main__":
    sys.exit(main())
