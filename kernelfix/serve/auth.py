"""The server's bearer token: where it lives, how it is made, how a request's is checked.

One token per server, in a file only its owner can read (0600): ``--token-file F``, else
``$XDG_CONFIG_HOME/kernelfix/serve-token`` (``~/.config/kernelfix/serve-token``), made on the
first start and kept for the next, so clients read the same file. The judge hides that
directory from every candidate it runs (sandbox CREDENTIAL_PATHS), and ``kernelfix serve``
hides a ``--token-file`` elsewhere too.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

TOKEN_FILE_ENV = "KERNELFIX_TOKEN_FILE"
TOKEN_ENV = "KERNELFIX_TOKEN"
MIN_TOKEN_CHARS = 16


class TokenError(Exception):
    """The token file cannot be read or made, or holds no usable token."""


def default_token_file() -> Path:
    """``$KERNELFIX_TOKEN_FILE``, else ``$XDG_CONFIG_HOME/kernelfix/serve-token``."""
    if os.environ.get(TOKEN_FILE_ENV):
        return Path(os.environ[TOKEN_FILE_ENV])
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config_home / "kernelfix" / "serve-token"


def read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise TokenError(f"cannot read the token file {path}: {e}") from None
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise TokenError(
            f"the token file {path} must hold one token of at least {MIN_TOKEN_CHARS} characters, without spaces"
        )
    return token


def load_or_make(path: Path | None = None) -> tuple[str, Path, bool, str | None]:
    """(token, its file, whether it was made now, a warning about the file's mode or None).
    A missing file is made with a fresh random token (256 bits), mode 0600, its directory 0700."""
    path = Path(path) if path is not None else default_token_file()
    made = False
    if not path.exists():
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another server made it meanwhile: use theirs
            pass
        except OSError as e:
            raise TokenError(f"cannot make the token file {path}: {e}") from None
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
            made = True
    token = read_token(path)
    mode = stat.S_IMODE(path.stat().st_mode)
    warning = None
    if mode & 0o077:
        warning = f"the token file {path} is readable by others (mode {mode:04o}): chmod 600 {path}"
    return token, path, made, warning


def client_token(token: str | None = None, token_file: str | os.PathLike[str] | None = None) -> str:
    """The token a client sends: ``token``, else ``token_file``'s, else ``$KERNELFIX_TOKEN``, else the
    default token file's (the server's, on the same machine)."""
    if token:
        return token
    if token_file is not None:
        return read_token(Path(token_file))
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV].strip()
    path = default_token_file()
    if not path.exists():
        raise TokenError(
            f"no token: pass token= or token_file=, set ${TOKEN_ENV}, or start the server here once (it writes {path})"
        )
    return read_token(path)


def authorized(header: bytes | None, token: bytes) -> bool:
    """Whether an ``Authorization`` header carries the token. The comparison takes the same time
    wherever the first wrong byte is (secrets.compare_digest)."""
    if not header:
        return False
    scheme, _, given = header.partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return secrets.compare_digest(given.strip(), token)
