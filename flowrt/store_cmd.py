"""`flow store init URL` (make or migrate the PostgreSQL store's tables) and `flow export RUN
--to LOCATION` (copy a run between stores, either way, with its hashes unchanged)."""

from __future__ import annotations

import sys

import click


def _finish(as_json: bool, code: int, text: str, **fields) -> None:
    """A result: `fields` as one JSON document (docs/cli.md, "Results as data"), or `text` (on
    stdout when it succeeded, stderr when not); then exit with `code`."""
    if as_json:
        from flowrt.results import document, write

        write(document(code, message=None if code == 0 else text, **fields))
    else:
        (sys.stdout if code == 0 else sys.stderr).write(text + "\n")
    sys.exit(code)


@click.group("store")
def store_group() -> None:
    """Manage a store of runs (a PostgreSQL database)."""


@store_group.command("init")
@click.argument("url")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON document.")
def store_init_command(url: str, as_json: bool) -> None:
    """Create the Flow tables in the PostgreSQL database at URL, or migrate them to this flow's
    version (idempotent). Refuses a database whose tables are newer than this flow."""
    from flowrt.store import StorageError, is_database_url
    from flowrt.store.postgres_schema import SchemaTooNew, init_schema

    if not is_database_url(url):
        _finish(as_json, 2, f"flow store init takes a postgresql:// URL, not {url!r} "
                "(a runs directory needs no initialisation)")
    try:
        done = init_schema(url)
    except SchemaTooNew as problem:
        _finish(as_json, 2, str(problem))
    except StorageError as problem:
        _finish(as_json, 5, f"storage failure: {problem}")
    if done["from"] == done["to"]:
        text = f"the Flow tables are at version {done['to']}: nothing to do"
    elif done["from"] is None:
        text = f"created the Flow tables (version {done['to']})"
    else:
        text = f"migrated the Flow tables from version {done['from']} to {done['to']}"
    _finish(as_json, 0, text, fromVersion=done["from"], toVersion=done["to"])


@click.command("export")
@click.argument("run_id")
@click.option("--to", "target", required=True, metavar="DIR|URL",
              help="The store to copy the run into: a runs directory or a postgresql:// URL.")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL",
              help="The store it is in (default: $FLOW_STORE, $FLOW_RUNS or ./.flow/runs).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON document.")
def export_command(run_id: str, target: str, runs_dir: str | None, as_json: bool) -> None:
    """Copy run RUN_ID to another store, byte for byte: the same facts and hashes, host records,
    values (holes stay holes), sources and archive. The run is verified before it is copied and
    again in its new place."""
    from flowrt.cli import store_location
    from flowrt.store import RunExists, RunNotFound, StorageError, open_store

    source = store_location(runs_dir)
    try:
        image = open_store(source).read_image(run_id)
        open_store(target).write_image(run_id, image)
    except StorageError as problem:
        _finish(as_json, 5, f"storage failure: {problem}", run=run_id)
    except (RunNotFound, RunExists, ValueError) as problem:
        _finish(as_json, 2, str(problem), run=run_id)
    _finish(as_json, 0, f"exported run {run_id} ({len(image.facts)} facts) to {target}", run=run_id,
            to=target, facts=len(image.facts))
