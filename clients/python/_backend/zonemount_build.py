"""The client's build backend (PEP 517, PEP 660): stdlib only, so that
``pip install --no-index`` works in a stock virtualenv, with or without
``--no-build-isolation`` (Debian's venv has a setuptools without
``bdist_wheel``, and an isolated build would fetch one).

It builds a pure-Python wheel of ``src/zonemount`` (``py3-none-any``), an
editable wheel (a ``.pth`` naming ``src``), and an sdist. Name, version
and the rest come from ``pyproject.toml``'s ``[project]`` table.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "zonemount"


def _project() -> Dict[str, Any]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # pragma: no cover - 3.9 and 3.10
        return _project_fallback(text)
    project: Dict[str, Any] = tomllib.loads(text)["project"]
    return project


def _project_fallback(text: str) -> Dict[str, Any]:
    """The ``[project]`` table's plain ``key = "string"`` lines (all this
    backend reads), for Pythons without tomllib."""
    section = text.split("[project]", 1)[1].split("\n[", 1)[0]
    out: Dict[str, Any] = {}
    for key, value in re.findall(r'^([A-Za-z-]+)\s*=\s*"([^"]*)"', section, re.M):
        out[key] = value
    lic = re.search(r'^license\s*=\s*\{\s*text\s*=\s*"([^"]*)"', section, re.M)
    if lic:
        out["license"] = {"text": lic.group(1)}
    return out


def _names() -> Tuple[str, str, str]:
    p = _project()
    name = str(p["name"])
    version = str(p["version"])
    dist = re.sub(r"[-_.]+", "_", name).lower()
    return name, version, f"{dist}-{version}"


def _metadata() -> str:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
    ]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    lic = p.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append(f"License: {lic['text']}")
    readme = ROOT / str(p.get("readme", "README.md"))
    body = ""
    if readme.is_file():
        lines.append("Description-Content-Type: text/markdown")
        body = readme.read_text(encoding="utf-8")
    return "\n".join(lines) + "\n\n" + body


def _wheel_file() -> str:
    return (
        "Wheel-Version: 1.0\n"
        "Generator: zonemount_build\n"
        "Root-Is-Purelib: true\n"
        "Tag: py3-none-any\n"
    )


def _dist_info(directory: Path) -> str:
    _, _, base = _names()
    info = directory / f"{base}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(_metadata(), encoding="utf-8")
    (info / "WHEEL").write_text(_wheel_file(), encoding="utf-8")
    return info.name


def _package_files() -> List[Tuple[str, bytes]]:
    src = ROOT / "src" / PACKAGE
    files = []
    for p in sorted(src.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            files.append((f"{PACKAGE}/{p.relative_to(src).as_posix()}", p.read_bytes()))
    return files


def _write_wheel(wheel_directory: str, files: List[Tuple[str, bytes]]) -> str:
    _, _, base = _names()
    info = f"{base}.dist-info"
    files = files + [
        (f"{info}/METADATA", _metadata().encode()),
        (f"{info}/WHEEL", _wheel_file().encode()),
    ]
    record = []
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    filename = f"{base}-py3-none-any.whl"
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(
        os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED
    ) as z:
        for name, data in files:
            zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename


# PEP 517 hooks.


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(
    config_settings: Optional[Dict[str, Any]] = None,
) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None
) -> str:
    return _dist_info(Path(metadata_directory))


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None
) -> str:
    return _dist_info(Path(metadata_directory))


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    return _write_wheel(wheel_directory, _package_files())


def build_editable(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    pth = (str(ROOT / "src") + "\n").encode()
    return _write_wheel(wheel_directory, [(f"_{PACKAGE}_editable.pth", pth)])


def build_sdist(
    sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None
) -> str:
    _, _, base = _names()
    filename = f"{base}.tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    members = ["pyproject.toml", "README.md", "_backend", "src", "tests"]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for m in members:
            p = ROOT / m
            if p.exists():
                tar.add(
                    p,
                    arcname=f"{base}/{m}",
                    filter=lambda ti: None if "__pycache__" in ti.name else ti,
                )
        info = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(info)
        ti.mode = 0o644
        tar.addfile(ti, io.BytesIO(info))
    return filename
