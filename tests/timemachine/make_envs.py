"""Side virtual environments with old pylance releases, and the datasets each writes.

``python tests/timemachine/make_envs.py [RELEASE ...]`` makes ``.venv-lance/<release>/`` (gitignored,
like ``.venv-airflow``) with ``python -m venv`` + ``pip install pylance==RELEASE`` and the numpy /
pyarrow pins that release needs, then runs ``writer.py`` with that interpreter into
``.venv-lance/data/<release>/``. Both steps are cached (a ``.ok`` marker each); a release that
cannot install is recorded in ``.venv-lance/<release>.failed`` with pip's last lines and skipped.
The tests call ``ensure(release)``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("LSO_TIMEMACHINE_DIR", ROOT / ".venv-lance"))
WRITER = Path(__file__).resolve().parent / "writer.py"

# one release per era the issue names; the pins are what each needs on Python 3.11
RELEASES: dict[str, list[str]] = {
    "0.6.5": ["numpy<2", "pyarrow>=12,<13", "pandas<2.2"],
    "0.8.21": ["numpy<2", "pyarrow>=12,<15", "pandas<2.2"],
    "0.10.5": ["numpy<2", "pyarrow>=12,<15", "pandas<2.2"],  # its add/drop columns duplicated field ids
    "0.10.18": ["numpy<2", "pyarrow>=12,<15", "pandas<2.2"],
    "0.16.1": ["numpy<2", "pyarrow>=14,<17", "pandas<2.2"],
    "0.21.0": ["numpy<2", "pyarrow>=14,<18", "pandas<2.3"],  # overlapping index fragment bitmaps
    "0.20.0": ["numpy<2", "pyarrow>=14,<18", "pandas<2.3"],
    "0.27.2": ["numpy<2", "pyarrow>=14,<19", "pandas<2.3"],
    "0.35.0": ["pyarrow>=14,<21", "pandas"],
    "1.0.4": ["pyarrow>=14,<21", "pandas"],
    "4.0.2": ["pyarrow>=14,<22", "pandas"],
    "10.0.0": ["pyarrow>=14", "pandas"],
}
# the default suite's releases (cheap to install, the two formats that fail most)
DEFAULT = ["0.10.18", "0.27.2"]


def venv_python(release: str) -> Path:
    return CACHE / release / "bin" / "python"


def data_dir(release: str) -> Path:
    return CACHE / "data" / release


class ReleaseUnavailable(RuntimeError):
    """The release could not be installed (pip's reason in the message)."""


def make_env(release: str) -> Path:
    """The release's interpreter, making its venv first when missing; ReleaseUnavailable when pip fails."""
    env, ok, failed = CACHE / release, CACHE / f"{release}.ok", CACHE / f"{release}.failed"
    if ok.exists():
        return venv_python(release)
    if failed.exists():
        raise ReleaseUnavailable(failed.read_text())
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
    cmd = [str(venv_python(release)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--only-binary=:all:", f"pylance=={release}", *RELEASES.get(release, [])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        reason = f"pylance=={release} does not install on Python {sys.version.split()[0]}:\n" + \
            "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        failed.write_text(reason)
        raise ReleaseUnavailable(reason)
    ok.touch()
    return venv_python(release)


def make_data(release: str) -> Path:
    """Run the writer with the release's interpreter (cached); returns the release's data dir
    (one dataset per subdirectory, ``manifest.json`` listing what was written and skipped)."""
    out = data_dir(release)
    if (out / "manifest.json").exists():
        return out
    py = make_env(release)
    tmp = out.with_name(out.name + ".tmp")
    subprocess.run(["rm", "-rf", str(tmp)], check=True)
    tmp.mkdir(parents=True)
    proc = subprocess.run([str(py), str(WRITER), str(tmp)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"writer for pylance {release} failed:\n{proc.stdout[-3000:]}\n"
                           f"{proc.stderr[-3000:]}")
    subprocess.run(["rm", "-rf", str(out)], check=True)
    tmp.rename(out)
    return out


def ensure(release: str) -> tuple[Path, dict]:
    """(data dir, manifest) of a release, making env and data when missing."""
    out = make_data(release)
    return out, json.loads((out / "manifest.json").read_text())


def main(argv: list[str]) -> int:
    for release in argv or list(RELEASES):
        try:
            out, manifest = ensure(release)
            print(f"{release}: {len(manifest['datasets'])} datasets in {out}; skipped: {manifest['skipped']}")
        except ReleaseUnavailable as e:
            print(f"{release}: SKIPPED - {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
