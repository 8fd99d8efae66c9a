"""`flow store init URL` (make or migrate the PostgreSQL store's tables) and `flow export RUN
--to LOCATION` (copy a run between stores, either way, with its hashes unchanged)."""

from __future__ import annotations

import sys

import click


@click.group("store")
def store_group() -> None:
    """Manage a store of runs (a PostgreSQL database)."""


@store_group.command("init")
@click.argument("url")
def store_init_command(url: str) -> None:
    """Create the Flow tables in the PostgreSQL database at URL, or migrate them to this flow's
    version (idempotent). Refuses a database whose tables are newer than this flow."""
    from flowrt.store import StorageError, is_database_url
    from flowrt.store.postgres_schema import SchemaTooNew, init_schema

    if not is_database_url(url):
        sys.stderr.write(f"flow store init takes a postgresql:// URL, not {url!r} "
                         "(a runs directory needs no initialisation)\n")
        sys.exit(2)
    try:
        done = init_schema(url)
    except SchemaTooNew as problem:
        sys.stderr.write(f"{problem}\n")
        sys.exit(2)
    except StorageError as problem:
        sys.stderr.write(f"storage failure: {problem}\n")
        sys.exit(5)
    if done["from"] == done["to"]:
        sys.stdout.write(f"the Flow tables are at version {done['to']}: nothing to do\n")
    elif done["from"] is None:
        sys.stdout.write(f"created the Flow tables (version {done['to']})\n")
    else:
        sys.stdout.write(f"migrated the Flow tables from version {done['from']} to {done['to']}\n")


@click.command("export")
@click.argument("run_id")
@click.option("--to", "target", required=True, metavar="DIR|URL",
              help="The store to copy the run into: a runs directory or a postgresql:// URL.")
@click.option("--runs", "--store", "runs_dir", default=None, metavar="DIR|URL",
              help="The store it is in (default: $FLOW_STORE, $FLOW_RUNS or ./.flow/runs).")
def export_command(run_id: str, target: str, runs_dir: str | None) -> None:
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
        sys.stderr.write(f"storage failure: {problem}\n")
        sys.exit(5)
    except (RunNotFound, RunExists, ValueError) as problem:
        sys.stderr.write(f"{problem}\n")
        sys.exit(2)
    sys.stdout.write(f"exported run {run_id} ({len(image.facts)} facts) to {target}\n")
