"""Creating the tables and upgrading an older database, at open.

The schema only grows: a new release may add tables, columns and indexes, never rename or drop
one (the house rule for schema changes). So the upgrade is mechanical and needs no migration
scripts: ``create_or_upgrade`` creates the missing tables, then adds every column the models
declare that the database lacks, with the model's default (so existing rows get it), then the
missing indexes.

Contract:
- Atomic: everything happens in one writer transaction (DDL is transactional on both SQLite
  and PostgreSQL), so a failure leaves the database as it was.
- Idempotent and safe to race: two processes opening the same old database at once (the
  studio and a worker) serialise on the writer lock (SQLite ``BEGIN IMMEDIATE``; a PostgreSQL
  advisory transaction lock) and the second finds nothing to do.
- A new column that is NOT NULL must have a default in its model (a literal or a factory,
  evaluated once at upgrade time); otherwise the upgrade refuses with the column's name.
- Not handled: new unique or check constraints on existing tables, changed column types.
"""

from __future__ import annotations

import json

from sqlalchemy import JSON, Column, Table, inspect, literal
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.types import String
from sqlmodel import SQLModel
from pydantic_core import PydanticUndefined

from storage import models  # noqa: F401  (registers the tables)
from storage.errors import Unavailable

# any constant: the key of the PostgreSQL advisory lock that serialises schema upgrades
_PG_LOCK_KEY = 0x5EF7AC7


def create_or_upgrade(engine: Engine) -> list[str]:
    """Create missing tables, add missing columns and indexes; returns the added
    ``table.column`` names (empty when the database was up to date)."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_LOCK_KEY})")
        SQLModel.metadata.create_all(conn)
        return _add_missing(conn)


def _add_missing(conn: Connection) -> list[str]:
    insp = inspect(conn)
    added = []
    for table in SQLModel.metadata.sorted_tables:
        present = {c["name"] for c in insp.get_columns(table.name)}
        for column in table.columns:
            if column.name not in present:
                conn.exec_driver_sql(_add_column_sql(conn, table, column))
                added.append(f"{table.name}.{column.name}")
        indexes = {i["name"] for i in insp.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexes:
                index.create(conn)
    return added


def _add_column_sql(conn: Connection, table: Table, column: Column) -> str:
    prep = conn.dialect.identifier_preparer
    sql = f"ALTER TABLE {prep.format_table(table)} ADD COLUMN {prep.format_column(column)} " \
          f"{column.type.compile(dialect=conn.dialect)}"
    default = _model_default(table, column)
    if default is not None:
        sql += f" DEFAULT {_literal(conn, column, default)}"
    if not column.nullable:
        if default is None:
            raise Unavailable(f"cannot upgrade the database: the new column {table.name}.{column.name} is NOT NULL "
                              "and its model gives no default; give it a default (or make it nullable)")
        sql += " NOT NULL"
    return sql


def _model_default(table: Table, column: Column):
    """The value the model would give this column for a new row (factories called once)."""
    for mapper in SQLModel._sa_registry.mappers:
        if mapper.local_table is table:
            field = mapper.class_.model_fields.get(column.name)
            if field is None:
                return None
            value = field.get_default(call_default_factory=True)
            return None if value is PydanticUndefined else value
    return None


def _literal(conn: Connection, column: Column, value) -> str:
    if isinstance(column.type, JSON):
        value, type_ = json.dumps(value), String()
    else:
        type_ = column.type
    return str(literal(value, type_).compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
