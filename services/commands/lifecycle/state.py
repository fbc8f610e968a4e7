"""`serving state backup|restore|accept`: the operator's commands over the deployment state store, the one the stack
uses (`SERVING_STATE_URL`, else the embedded SQLite file of the run directory `SERVING_RUN_DIR`).

Gateways, the controller and the replica agents never apply a store that lost its state, nor one older than they saw
(`services.lifecycle.store.rules`); these commands are how an operator puts a state back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from services.common.cli import fail
from services.common.cli_display import typer_app
from services.common.errors import ServingError

if TYPE_CHECKING:
    from services.lifecycle.store import DeploymentStore

state_app = typer_app(
    help="Back up and restore the deployment state store (which versions each endpoint serves, canaries, rollouts).",
    no_args_is_help=True,
)


@state_app.command("backup")
def backup(
    file: Path = typer.Argument(..., help="The backup file to write (one SQLite file holding the state's row)."),
    force: bool = typer.Option(False, "--force", help="Replace FILE if it exists."),
) -> None:
    """Write the live state (its epoch, revision and document) into a new backup file FILE, while the stack runs.

    Works on the embedded SQLite store and on a PostgreSQL one alike. Refuses a store that lost its state, or whose
    state is invalid."""
    from services.lifecycle.store.backup import backup as back_up

    with _store() as store:
        summary = _run(lambda: back_up(store, file, overwrite=force))
    print(f"backed up {summary} of {store.url} to {file}")


@state_app.command("restore")
def restore(file: Path = typer.Argument(..., help="A backup made by `serving state backup`.")) -> None:
    """Put the state of FILE back into the live store, while the stack runs.

    Only the state's row is read from FILE, and checked whole first (a state that breaks a rule is refused, naming
    the field); nothing else in the file reaches the store. Its state gets a new restore epoch, so that every gateway
    worker, the controller and the replica agents take it even when they saw a later revision; they follow it within
    a poll interval, and the gateways' `/health/ready` says `state_store: ok` again."""
    from services.lifecycle.store.backup import restore as put_back

    with _store() as store:
        summary, replaced = _run(lambda: put_back(store, file))
    print(f"restored {summary} from {file} into {store.url} (it replaced {replaced}); every process follows it now")


@state_app.command("accept")
def accept() -> None:
    """Make every process take the state the store holds now, even one older than they saw.

    For a store restored by other means: pg_restore, or a SQLite file put back by hand. The state gets a new restore
    epoch; a store that has no valid state is refused, naming the field (restore a backup instead)."""
    from services.lifecycle.store.backup import accept as take

    with _store() as store:
        summary = _run(lambda: take(store))
    print(f"accepted {summary} in {store.url}; every process follows it now")


@contextmanager
def _store() -> Iterator[DeploymentStore]:
    """The stack's state store, from the same settings as every other command, closed afterwards."""
    from services.common.settings import RunSettings, default_state_url
    from services.lifecycle.store import DeploymentStore

    settings = RunSettings()
    store = _run(lambda: DeploymentStore.open(settings.state_url or default_state_url(settings.run_dir)))
    try:
        yield store
    finally:
        store.close()


def _run(action):
    """`action()`, a refusal ending the command with its message."""
    try:
        return action()
    except ServingError as exc:
        fail(exc.message)
    except OSError as exc:
        fail(str(exc))
