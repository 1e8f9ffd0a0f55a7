"""Where the studio may listen: without sign-in only on the loopback address.

Whoever reaches the studio can start runs, that is run code, so serving it to a network without
sign-in must be a deliberate act: ``REFRACT_ALLOW_NO_SIGN_IN=1``. Checked once, when the server
imports ``app.py`` (before it listens).
"""

from __future__ import annotations

import ipaddress
from typing import Optional

from storage import settings

FORCE_ENV = "REFRACT_ALLOW_NO_SIGN_IN"


def is_loopback(address: Optional[str]) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ``::1``; an empty address means every interface."""
    if not address:
        return False
    if address.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it may resolve to anything


def refusal(address: Optional[str], sign_in: bool, forced: bool) -> Optional[str]:
    """Why the studio must not start on ``address``, or None when it may."""
    if sign_in or forced or is_loopback(address):
        return None
    where = address or "every interface (server.address is not set)"
    return (f"Refusing to serve the studio on {where} without sign-in: anyone who reaches it could start runs, "
            "which runs their code. Either configure sign-in (an [auth] table in .streamlit/secrets.toml, see "
            "README \"Deploying for a team\"), or serve on 127.0.0.1 (--server.address=127.0.0.1), or set "
            f"{FORCE_ENV}=1 to serve without sign-in knowingly (everyone who reaches the port is then an admin).")


def check_or_exit() -> None:
    """Exit the server with the reason when ``refusal`` says so (reads Streamlit's config and secrets)."""
    import logging
    import sys

    from streamlit import config

    from ui.identity import auth_configured

    bad = settings.problems()  # a bad REFRACT_* value: said once, before anything reads it
    if bad:
        print("\n".join(f"error: {b}" for b in bad), file=sys.stderr, flush=True)
        raise SystemExit(2)
    reason = refusal(config.get_option("server.address"), auth_configured(), bool(settings.value(FORCE_ENV)))
    if reason:
        print(f"error: {reason}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    if not auth_configured():
        logging.getLogger("refract").warning("local mode: everyone who reaches this port is an admin")
