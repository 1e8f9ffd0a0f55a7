"""Build the command line that starts one sandboxed worker.

Two levels, chosen once per process (``mode``):
- **bwrap**: Debian's bubblewrap — new PID/IPC/UTS/network namespaces (network kept only when
  ``network=true``), a read-only view of /usr, the Python prefix, the venv and the worker's own
  code, a private size-limited tmpfs /tmp as working directory, no capabilities, an empty
  environment. Run by root, bubblewrap keeps only CAP_SETUID/SETGID so that the worker can
  become ``nobody`` (65534) before it reads any user input; run by a normal user it uses a user
  namespace and the worker keeps that user's uid.
- **process**: a plain ``python -I -B`` child in its own session with rlimits and a scrubbed
  environment; as root it runs as 65534 when the interpreter is readable by that user. It
  does *not* stop file reads or network access (docs/security.md).
The worker itself sets its rlimits (runtime/worker.py) so both levels get the same limits.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

log = logging.getLogger(__name__)
NOBODY = 65534
BWRAP = "/usr/bin/bwrap"
# Runtime files a dynamically linked Python may read; missing ones are skipped (--ro-bind-try).
ETC_ALWAYS = ("/etc/localtime", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/passwd",
              "/etc/group", "/etc/mime.types")
ETC_NETWORK = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl", "/etc/ca-certificates",
               "/etc/gai.conf", "/etc/host.conf")


def base_env(home: str) -> dict:
    """The whole environment of user code: no keys, no proxies, nothing inherited."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8",
        # the pool gives parallelism; one BLAS thread per worker also keeps RLIMIT_AS honest
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    }


def _readonly_paths(python: str, worker: Path) -> list[str]:
    """Minimal set of directories to bind: the interpreter's prefixes and the worker code."""
    wanted = [sys.base_prefix, sys.prefix, str(Path(python).resolve().parent.parent), str(worker.parent)]
    out: list[str] = []
    for p in sorted({os.path.realpath(w) for w in wanted} | {os.path.abspath(w) for w in wanted}, key=len):
        if p != "/" and not p.startswith("/usr/") and not any(p == o or p.startswith(o + "/") for o in out):
            out.append(p)
    return out


def bwrap_argv(spec, worker: Path) -> list[str]:
    root = os.geteuid() == 0
    argv = [BWRAP, "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
            "--unshare-cgroup-try", "--cap-drop", "ALL"]
    if not spec.network:
        argv.append("--unshare-net")
    if root:
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # dropped for good by the worker
    else:
        argv.append("--unshare-user")
    argv += ["--clearenv"]
    for key, value in base_env("/tmp").items():
        argv += ["--setenv", key, value]
    argv += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for path in ETC_ALWAYS + (ETC_NETWORK if spec.network else ()):
        argv += ["--ro-bind-try", path, path]
    # The private /tmp comes before the binds of the Python install, the venv and the worker
    # code: mounted after them, it would hide any that live under /tmp (a checkout in /tmp).
    argv += ["--perms", "1777", "--size", str((spec.file_mb + 64) << 20), "--tmpfs", "/tmp"]
    made: set[str] = {"/tmp"}
    for path in _readonly_paths(spec.python, worker):
        # bubblewrap creates missing parents 0700, unreadable once the worker is nobody
        for parent in reversed(Path(path).parents):
            if str(parent) != "/" and str(parent) not in made:
                made.add(str(parent))
                argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp", spec.python, "-I", "-B", str(worker)]
    if root:
        argv += ["--uid", str(NOBODY)]
    return argv


@functools.lru_cache(maxsize=None)
def _bwrap_works(python: str) -> bool:
    if not os.path.exists(BWRAP):
        return False

    probe = SimpleNamespace(network=False, file_mb=16, python=python)
    argv = bwrap_argv(probe, Path(__file__).resolve().parent / "runtime" / "worker.py")
    argv = argv[: argv.index("-I")] + ["-I", "-c", "pass"]
    try:
        done = subprocess.run(argv, env={}, capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("bubblewrap is installed but could not start (%s); workers run without it", exc)
        return False
    if done.returncode != 0:
        log.warning("bubblewrap is installed but failed (%s); workers run without it",
                    done.stderr.decode(errors="replace").strip()[:300])
    return done.returncode == 0


def mode(spec) -> str:
    """"bwrap" or "process" for this spec (``spec.isolation`` may force one)."""
    if spec.isolation == "bwrap":
        if not _bwrap_works(spec.python):
            raise RuntimeError(f"isolation='bwrap' was asked for but {BWRAP} is missing or does not work here")
        return "bwrap"
    if spec.isolation == "process":
        return "process"
    return "bwrap" if _bwrap_works(spec.python) else "process"


def _readable_by_nobody(path: str) -> bool:
    """True if every directory on the way to ``path`` lets 'other' users through."""
    p = Path(path).resolve()
    return all(os.stat(d).st_mode & 0o001 for d in [p, *p.parents] if d.is_dir())


def command(spec, worker: Path, host_dir: str):
    """(argv, env, cwd, uid_or_None) to start one worker; ``host_dir`` is its private folder."""
    if mode(spec) == "bwrap":
        return bwrap_argv(spec, worker), {}, host_dir, None
    work = os.path.join(host_dir, "work")
    os.mkdir(work, 0o700)
    user = None
    if os.geteuid() == 0:
        if all(_readable_by_nobody(p) for p in (spec.python, sys.prefix, sys.base_prefix, str(worker))):
            user = NOBODY
            os.chown(work, NOBODY, NOBODY)
        else:
            log.warning("running evaluator workers as root: %s is not readable by uid %d and bubblewrap is "
                        "not in use", spec.python, NOBODY)
    return [spec.python, "-I", "-B", str(worker)], base_env(work), work, user
