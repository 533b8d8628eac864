"""The API documentation page (/docs) served from an installed package, never a CDN,
and the bearer scheme declared in the OpenAPI document.

Swagger UI's files come from `swagger-ui-bundle-v2` (in the `serve` extra; it installs
the module `swagger_ui_bundle`). Swagger UI 5 or later is needed: FastAPI writes OpenAPI
3.1, which Swagger UI 4 (the older `swagger-ui-bundle` package) cannot read. Without
it /docs answers 404 with the command that installs it; /openapi.json works either way.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# The only files the page loads; served by name from this list, so no request chooses a path.
ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css", "favicon-32x32.png": "image/png"}
ASSET_URL = "/docs/assets/"


def swagger_dir() -> Path | None:
    try:
        import swagger_ui_bundle
    except ImportError:
        return None
    path = Path(swagger_ui_bundle.swagger_ui_path)  # .../vendor/swagger-ui-<version>
    major = path.name.removeprefix("swagger-ui-").split(".")[0]
    if not major.isdigit() or int(major) < 5:
        return None
    return path if all((path / name).is_file() for name in ASSETS) else None


def add_docs(app, open_paths: frozenset[str], secured: bool) -> None:
    """Routes for /docs and its assets, and the OpenAPI document's security section."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.openapi.utils import get_openapi
    from fastapi.responses import FileResponse

    from marag.errors import UnknownNameError
    from marag.serve.http import SafeHTML, content_security_policy

    assets = swagger_dir()

    @app.get("/docs", include_in_schema=False)
    async def docs():
        if assets is None:
            raise UnknownNameError("the API docs page needs Swagger UI's files", hint="pip install 'swagger-ui-bundle-v2>=5.17' (in marag[serve]); /openapi.json works without it")
        page = get_swagger_ui_html(
            openapi_url="/openapi.json", title=f"{app.title} API", swagger_js_url=ASSET_URL + "swagger-ui-bundle.js",
            swagger_css_url=ASSET_URL + "swagger-ui.css", swagger_favicon_url=ASSET_URL + "favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": False},
        )  # fmt: skip
        html = page.body.decode("utf-8")
        # the page starts Swagger UI with an inline script: allowed by its hash, as the
        # viewer pages' script is (`marag.serve.http`), never by 'unsafe-inline'
        inline = re.findall(r"<script>(.*?)</script>", html, re.S)
        return SafeHTML(html, headers={"content-security-policy": content_security_policy(inline)})

    @app.get(ASSET_URL + "{name}", include_in_schema=False)
    async def docs_asset(name: str):
        if assets is None or name not in ASSETS:
            raise UnknownNameError(f"no docs asset {name[:80]!r}")
        return FileResponse(assets / name, media_type=ASSETS[name])

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            if secured:
                schema.setdefault("components", {})["securitySchemes"] = {
                    "bearer": {"type": "http", "scheme": "bearer", "description": "the token the server was started with (--token-env)"}
                }
                schema["security"] = [{"bearer": []}]
                for path in open_paths:  # these need no token
                    for op in schema.get("paths", {}).get(path, {}).values():
                        op["security"] = []
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
