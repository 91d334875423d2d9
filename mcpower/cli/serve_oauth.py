"""`mcpower serve --http`'s OAuth options: the flags, and the OAuthOptions they make (server/auth/oauth.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from mcpower.config import Settings
from mcpower.errors import McpowerError

if TYPE_CHECKING:
    from mcpower.server.auth.oauth import OAuthOptions

# The flags that mean something only with --oauth-issuer.
_OAUTH_ONLY = ("--jwks", "--audience", "--datasets-claim")

OAuthIssuer = Annotated[
    str | None,
    typer.Option(
        metavar="URL",
        help="--http: accept JWT access tokens this OAuth issuer signs; scopes mcpower:read[:DATASETS] "
        "[env MCPOWER_OAUTH_ISSUER].",
        show_default=False,
    ),
]
Jwks = Annotated[
    str | None,
    typer.Option(
        metavar="SOURCE",
        help="--oauth-issuer: its signing keys, a JWK Set: a URL or a file [env MCPOWER_OAUTH_JWKS; default: from the "
        "issuer's metadata].",
        show_default=False,
    ),
]
Audience = Annotated[
    str | None,
    typer.Option(
        metavar="AUD",
        help="--oauth-issuer: the aud tokens must carry [env MCPOWER_OAUTH_AUDIENCE; default: the public URL].",
        show_default=False,
    ),
]
PublicUrl = Annotated[
    str | None,
    typer.Option(
        metavar="URL",
        help="--http: the URL clients reach /mcp at, e.g. https://kb.example.com/mcp: the OAuth resource "
        "[env MCPOWER_PUBLIC_URL; default http://HOST:PORT/mcp].",
        show_default=False,
    ),
]
DatasetsClaim = Annotated[
    str | None,
    typer.Option(
        metavar="CLAIM",
        help="--oauth-issuer: a token claim listing dataset patterns it may read, besides its scopes "
        "[env MCPOWER_OAUTH_DATASETS_CLAIM].",
        show_default=False,
    ),
]


def oauth_options(s: Settings) -> OAuthOptions | None:
    """OAuth resource-server mode as the settings ask, or None.

    Raises:
        McpowerError: its companions without --oauth-issuer, an unusable URL, no public URL on a wildcard address.
    """
    from mcpower.server.auth.access import WILDCARD_ADDRESSES
    from mcpower.server.auth.oauth import OAuthOptions

    if s.oauth_issuer is None:
        given = [f for f, v in zip(_OAUTH_ONLY, (s.oauth_jwks, s.oauth_audience, s.oauth_datasets_claim)) if v]
        if given:
            raise McpowerError(f"{', '.join(given)} need --oauth-issuer (or MCPOWER_OAUTH_ISSUER): the tokens' issuer")
        return None
    if s.public_url is None and s.http_host in WILDCARD_ADDRESSES:
        raise McpowerError(
            f"with --oauth-issuer on --host {s.http_host}, give --public-url: the URL clients reach /mcp at "
            "(e.g. https://kb.example.com/mcp), which tokens must name as their audience"
        )
    options = OAuthOptions(
        issuer=s.oauth_issuer,
        jwks=s.oauth_jwks,
        audience=s.oauth_audience,
        public_url=s.public_url,
        datasets_claim=s.oauth_datasets_claim,
    )
    return options.checked()
