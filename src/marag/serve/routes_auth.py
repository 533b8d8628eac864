"""Signing in from a browser: GET/POST /signin, POST /signout (the session cookie the
`marag.serve.http.Gate` accepts for reading; the token itself is checked by the Gate on
every request)."""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Query
from fastapi.responses import RedirectResponse
from starlette.requests import Request

from marag.serve import pages
from marag.serve.auth import cookie_name, safe_next
from marag.serve.http import SafeHTML
from marag.serve.state import ServeState, serve_state

router = APIRouter()


def _port(request) -> int | None:
    """The port the server listens on (the Gate names the cookie by it, too)."""
    server = request.scope.get("server")
    return server[1] if server else None


@router.get("/signin", response_class=SafeHTML, include_in_schema=False)
async def signin_form(next_path: str = Query("/", alias="next")):
    return SafeHTML(pages.signin_page(safe_next(next_path)))


@router.post("/signin", include_in_schema=False)
async def signin(request: Request, st: ServeState = Depends(serve_state)):
    sessions = st.sessions
    try:
        form = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=5)
    except ValueError:  # more fields than the form has
        return SafeHTML(pages.signin_page("/", "Send the sign-in form as it is."), 400)
    target = safe_next((form.get("next") or ["/"])[0])
    if sessions is None:
        return RedirectResponse(target, 303)  # no token: nothing to sign in to
    if sessions.locked():
        return SafeHTML(pages.signin_page(target, "Too many wrong tokens in the last minute: wait a minute and try again."), 429,
                        headers={"retry-after": str(sessions.retry_after())})  # fmt: skip
    value = sessions.sign_in((form.get("token") or [""])[0])
    if value is None:
        return SafeHTML(pages.signin_page(target, "That is not the token this server was started with."), 401)
    response = RedirectResponse(target, 303)
    response.set_cookie(cookie_name(_port(request)), value, max_age=sessions.max_age_s, path="/",
                        httponly=True, samesite="strict", secure=request.url.scheme == "https")  # fmt: skip
    return response


@router.post("/signout", include_in_schema=False)
async def signout(request: Request, st: ServeState = Depends(serve_state)):
    name = cookie_name(_port(request))
    if st.sessions is not None:
        st.sessions.sign_out(request.cookies.get(name))
    response = RedirectResponse("/signin" if st.sessions is not None else "/", 303)
    response.delete_cookie(name, path="/", httponly=True, samesite="strict")
    return response
