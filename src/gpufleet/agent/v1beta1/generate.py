"""Regenerate the device-plugin stubs from `api.proto` with grpcio-tools (a dev dependency).

    python -m gpufleet.agent.v1beta1.generate          # rewrite the committed stubs
    generate(out_root)                                 # write them under another root (tests)

The proto is compiled with `src/` as the include root so that the generated gRPC module
imports `gpufleet.agent.v1beta1.api_pb2` by its package path; the proto's own `package
v1beta1` is untouched, so the method paths stay `/v1beta1.DevicePlugin/...` as the kubelet
expects. Neither grpcio nor protobuf ships type information (no stub packages are pinned), so
the generated gRPC module and `.pyi` get a `# mypy: ignore-errors` header: mypy reads the
message fields from the `.pyi` without checking generated code.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
SRC_ROOT = PACKAGE_DIR.parents[2]
PROTO = PACKAGE_DIR / "api.proto"
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")
_MYPY_HEADER = "# mypy: ignore-errors\n"


class GenerateError(RuntimeError):
    """protoc failed (its diagnostics are on stderr)."""


def generate(out_root: Path) -> list[Path]:
    """Compile api.proto into `out_root/gpufleet/agent/v1beta1/`; return the generated files."""
    return compile_proto(PROTO, out_root)


def compile_proto(proto: Path, out_root: Path) -> list[Path]:
    """Compile `proto` (a file under `src/`) into the same place under `out_root`; return the files."""
    from grpc_tools import protoc  # type: ignore[import-untyped]  # dev-only, untyped

    out_root.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{SRC_ROOT}", f"--python_out={out_root}",
            f"--pyi_out={out_root}", f"--grpc_python_out={out_root}", str(proto)]
    if protoc.main(args) != 0:
        raise GenerateError(f"protoc failed on {proto}")
    out_dir = out_root / proto.parent.relative_to(SRC_ROOT)
    stem = proto.stem
    for name in (f"{stem}_pb2_grpc.py", f"{stem}_pb2.pyi"):
        path = out_dir / name
        path.write_text(_MYPY_HEADER + path.read_text())
    return [out_dir / f"{stem}{suffix}" for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")]


if __name__ == "__main__":
    for path in generate(SRC_ROOT):
        print(path.relative_to(SRC_ROOT))
    sys.exit(0)
