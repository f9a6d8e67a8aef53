"""Regenerate the kubelet DRA and plugin-registration stubs from their protos (grpcio-tools, dev).

    python -m gpufleet.agent.drav1.generate          # rewrite the committed stubs
    generate(out_root)                               # write them under another root (tests)

As for the device-plugin stubs (`gpufleet.agent.v1beta1.generate`): `src/` is the include root,
the protos' own packages (`k8s.io.kubelet.pkg.apis.dra.v1`, `pluginregistration`) are kept, so
the method paths are the kubelet's, and the generated code carries `# mypy: ignore-errors`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpufleet.agent.v1beta1.generate import SRC_ROOT, compile_proto

PACKAGE_DIR = Path(__file__).resolve().parent
PROTOS = (PACKAGE_DIR / "dra.proto", PACKAGE_DIR / "registration.proto")


def generate(out_root: Path) -> list[Path]:
    return [path for proto in PROTOS for path in compile_proto(proto, out_root)]


if __name__ == "__main__":
    for path in generate(SRC_ROOT):
        print(path.relative_to(SRC_ROOT))
    sys.exit(0)
