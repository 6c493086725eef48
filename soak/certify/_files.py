"""The certificate's files: digests of what it covers, its own digest, and `verify_certificate`."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.errors import HarnessError

__all__ = ["CERTIFICATE_FILE", "CERTIFICATE_HTML", "CertifyError", "FORMAT", "STORM_DIR", "VerifyResult",
           "body_digest", "file_digests", "suite_digest", "verify_certificate"]

CERTIFICATE_FILE = "certificate.json"
CERTIFICATE_HTML = "certificate.html"
#: the storm's run directory, relative to the certificate
STORM_DIR = "storm"
#: /2: clause results pass, fail, not-exercised, not-applicable or choice; profiles with required lists
FORMAT = "soak-certificate/2"
#: formats `verify_certificate` still re-hashes (its digests are laid out the same way)
READABLE_FORMATS = ("soak-certificate/1", FORMAT)


class CertifyError(HarnessError, ValueError):
    """A certify invocation that cannot run (bad arguments, a certificate that cannot be read)."""

    exit_code = 2


def _one_line(text: Any, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def suite_digest() -> tuple[str, int]:
    """SHA-256 over the installed soak package's source files (.py, .toml), sorted by path; and their count."""
    import soak

    root = Path(soak.__file__).resolve().parent
    files = sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.suffix in (".py", ".toml") and "__pycache__" not in p.parts
    )
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + bytes.fromhex(_sha256_file(p)) + b"\n")
    return h.hexdigest(), len(files)


def file_digests(base: str | os.PathLike[str], subdir: str) -> dict[str, str]:
    """`subdir/relative/path` -> SHA-256 of every file under `base/subdir`, sorted."""
    base = Path(base)
    root = base / subdir
    return {
        p.relative_to(base).as_posix(): _sha256_file(p)
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def body_digest(cert: dict[str, Any]) -> str:
    """SHA-256 of the certificate's canonical JSON without this field: an edit to the file shows."""
    body = {k: v for k, v in cert.items() if k != "certificate_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass
class VerifyResult:
    """What `verify_certificate` found: every difference as one line; `ok` when there are none."""

    path: Path
    checked: int = 0
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


def _load_certificate(path: Path) -> dict[str, Any]:
    if path.is_dir():
        path = path / CERTIFICATE_FILE
    try:
        cert = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CertifyError(f"no certificate at {path}; pass the certificate.json that soak certify wrote") from None
    except (OSError, ValueError) as exc:
        raise CertifyError(f"{path} is not readable JSON ({_one_line(exc)}); pass a certificate.json") from exc
    if not isinstance(cert, dict) or cert.get("format") not in READABLE_FORMATS:
        raise CertifyError(f"{path} is not a soak certificate (format {FORMAT!r}); pass a certificate.json")
    return cert


def verify_certificate(path: str | os.PathLike[str]) -> VerifyResult:
    """Re-hash the files a certificate lists, the certificate itself and the installed soak suite."""
    path = Path(path)
    if path.is_dir():
        path = path / CERTIFICATE_FILE
    cert = _load_certificate(path)
    base = path.parent
    out = VerifyResult(path)
    if cert.get("certificate_sha256") != body_digest(cert):
        out.differences.append(f"{path.name}: edited after it was written (its own digest no longer matches)")
    digests: dict[str, str] = cert.get("digests") or {}
    for rel, want in sorted(digests.items()):
        p = base / rel
        out.checked += 1
        if not p.is_file():
            out.differences.append(f"{rel}: missing")
        elif _sha256_file(p) != want:
            out.differences.append(f"{rel}: changed (sha256 {_sha256_file(p)[:16]}…, certified {want[:16]}…)")
    run_dir = cert.get("run_dir")
    if run_dir and (base / run_dir).is_dir():
        for rel in file_digests(base, run_dir):
            if rel not in digests:
                out.differences.append(f"{rel}: added after certification")
    digest, _n = suite_digest()
    if digest != cert.get("suite_sha256"):
        out.differences.append(
            f"suite: the installed soak's source hash {digest[:16]}… differs from the certified "
            f"{str(cert.get('suite_sha256'))[:16]}… (soak {cert.get('soak_version')})"
        )
    return out
