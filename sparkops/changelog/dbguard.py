"""Append-only in the database itself: triggers that refuse UPDATE and DELETE of a locked
change-log entry, of the rows that make up its text (flags, claims, evidence, engine links),
and of its corrections — whatever path the statement takes: a model's save(), any manager
(`_base_manager` included), queryset update()/delete(), a cascade, the admin, raw SQL.

"Locked" is Entry.locked_at <= now. The column is written at creation (created_at + the
grace period) and the triggers only ever move it earlier:
- the moment anything points at the entry: a correction of it (or of a claim in it) is
  inserted, or an experiment's entry_id (the entry recording its verdict) is set to it —
  locked_at becomes that moment;
- an entry SparkOps wrote itself — an action, its outcome, an observed configuration change, a
  decision: SPARKOPS_AUTHOR (any case) with no user, or a body starting OBSERVED_MARK — is
  locked from its insert: locked_at = created_at (changelog_is_observed() on PostgreSQL, the
  _SQLITE_OBSERVED condition on SQLite, say which rows; migration 0007 widened them from the
  observed entries to all of SparkOps's). Its parts (flags, claims, evidence, engine links)
  are written after the entry row, in the same transaction (entry_create, the import): such an
  entry whose fingerprint is still empty takes INSERTs of parts and one write of its
  fingerprint, which closes it.
Allowed on a locked row: nothing else, except setting author_id to NULL, which is what
deleting a user account does (the name written stays in author_name). A correction is never
updated, and never deleted once its entry is locked — which it is as soon as the correction
exists. A refusal is an IntegrityError whose message starts "append-only:".

Installed by migration changelog 0003 on PostgreSQL and SQLite, again by 0004, 0006 and 0007
(which added the locks above). On SQLite a migration that remakes one of these tables (most
AlterField/AddField there) drops its triggers — experiments_experiment's included: such a
migration must call install() again (tests/changelog/test_db_append_only.py checks they are
all present)."""

from .models import OBSERVED_MARK, SPARKOPS_AUTHOR

CHILD_TABLES = ("changelog_flagchange", "changelog_claim", "changelog_entry_engines", "changelog_evidencelink")
# Every column of changelog_entry / changelog_correction but author_id: what must stay equal
# when a user deletion sets author_id to NULL.
ENTRY_COLUMNS = (
    "id",
    "effective_at",
    "units",
    "kind",
    "title",
    "body_md",
    "reason",
    "expected_effect",
    "author_name",
    "created_at",
    "fingerprint",
    "locked_at",
)
CORRECTION_COLUMNS = (
    "id",
    "corrected_at",
    "text_md",
    "mark",
    "author_name",
    "created_at",
    "claim_id",
    "entry_id",
    "content_fingerprint",
)
# As they were at migration 0003 (a migration installs what its schema has).
CORRECTION_COLUMNS_0003 = CORRECTION_COLUMNS[:-1]

# An experiment's entry_id names the change-log entry of its verdict (a plain column, no key).
POINTER_TABLES = ("changelog_correction", "experiments_experiment")

_PG = (
    r"""
CREATE OR REPLACE FUNCTION changelog_is_observed(row_data jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT ((row_data->>'author_id') IS NULL AND lower(row_data->>'author_name') = '{author}')
      OR left(row_data->>'body_md', {mark_len}) = '{mark}'
$$;

CREATE OR REPLACE FUNCTION changelog_entry_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN  -- SparkOps's observed entries are locked from the start
    IF changelog_is_observed(to_jsonb(NEW)) AND NEW.locked_at > NEW.created_at THEN
      NEW.locked_at := NEW.created_at;
    END IF;
    RETURN NEW;
  END IF;
  IF TG_OP = 'DELETE' THEN
    IF OLD.locked_at <= clock_timestamp() THEN
      RAISE EXCEPTION 'append-only: change-log entry % is locked; it is never deleted', OLD.id
        USING ERRCODE = '23000';
    END IF;
    RETURN OLD;
  END IF;
  IF NEW.locked_at > OLD.locked_at THEN
    RAISE EXCEPTION 'append-only: the grace period of change-log entry % cannot be extended', OLD.id
      USING ERRCODE = '23000';
  END IF;
  IF OLD.locked_at <= clock_timestamp() AND NOT (
      NEW.author_id IS NULL AND (to_jsonb(NEW) - 'author_id') = (to_jsonb(OLD) - 'author_id'))
    AND NOT (  -- an observed entry being written: its fingerprint, once
      OLD.fingerprint = '' AND changelog_is_observed(to_jsonb(OLD))
      AND (to_jsonb(NEW) - 'fingerprint') = (to_jsonb(OLD) - 'fingerprint'))
    AND NOT (  -- changelog_lock_entry() locking it (its moment may have passed since it looked)
      pg_trigger_depth() > 1 AND (to_jsonb(NEW) - 'locked_at') = (to_jsonb(OLD) - 'locked_at')) THEN
    RAISE EXCEPTION 'append-only: change-log entry % is locked; write a correction', OLD.id
      USING ERRCODE = '23000';
  END IF;
  IF OLD.locked_at > clock_timestamp() AND changelog_is_observed(to_jsonb(NEW))
      AND NEW.locked_at > NEW.created_at THEN
    NEW.locked_at := NEW.created_at;
  END IF;
  RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION changelog_lock_entry() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE t timestamptz := clock_timestamp();
BEGIN  -- NEW points at an entry: it is locked from now on
  UPDATE changelog_entry SET locked_at = t WHERE id = NEW.entry_id AND locked_at > t;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION changelog_locked_entry_of(row_data jsonb) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE eid bigint := (row_data->>'entry_id')::bigint;
BEGIN
  IF eid IS NULL AND row_data ? 'correction_id' THEN
    SELECT c.entry_id INTO eid FROM changelog_correction c WHERE c.id = (row_data->>'correction_id')::bigint;
  END IF;
  IF EXISTS (SELECT 1 FROM changelog_entry e WHERE e.id = eid AND e.locked_at <= clock_timestamp()) THEN
    RETURN eid;
  END IF;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION changelog_child_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE eid bigint;
BEGIN
  IF TG_OP = 'INSERT' THEN  -- a correction's evidence may be added to a locked entry's correction
    IF EXISTS (SELECT 1 FROM changelog_entry e WHERE e.id = (to_jsonb(NEW)->>'entry_id')::bigint
               AND e.locked_at <= clock_timestamp()
               AND NOT (e.fingerprint = '' AND changelog_is_observed(to_jsonb(e)))) THEN
      RAISE EXCEPTION 'append-only: % of locked change-log entry % cannot be added', TG_TABLE_NAME,
        to_jsonb(NEW)->>'entry_id' USING ERRCODE = '23000';
    END IF;
    RETURN NEW;
  END IF;
  eid := changelog_locked_entry_of(to_jsonb(OLD));
  IF eid IS NULL AND TG_OP = 'UPDATE' THEN
    eid := changelog_locked_entry_of(to_jsonb(NEW));
  END IF;
  IF eid IS NOT NULL THEN
    RAISE EXCEPTION 'append-only: % of locked change-log entry % cannot be %', TG_TABLE_NAME, eid,
      CASE TG_OP WHEN 'DELETE' THEN 'deleted' ELSE 'changed' END USING ERRCODE = '23000';
  END IF;
  IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
  RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION changelog_correction_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    IF NOT (NEW.author_id IS NULL AND (to_jsonb(NEW) - 'author_id') = (to_jsonb(OLD) - 'author_id')) THEN
      RAISE EXCEPTION 'append-only: correction % is never changed; write another correction', OLD.id
        USING ERRCODE = '23000';
    END IF;
    RETURN NEW;
  END IF;
  IF EXISTS (SELECT 1 FROM changelog_entry e WHERE e.id = OLD.entry_id AND e.locked_at <= clock_timestamp()) THEN
    RAISE EXCEPTION 'append-only: correction % of locked change-log entry % is never deleted', OLD.id, OLD.entry_id
      USING ERRCODE = '23000';
  END IF;
  RETURN OLD;
END $$;

DROP TRIGGER IF EXISTS changelog_entry_guard ON changelog_entry;
CREATE TRIGGER changelog_entry_guard BEFORE INSERT OR UPDATE OR DELETE ON changelog_entry
  FOR EACH ROW EXECUTE FUNCTION changelog_entry_guard();
DROP TRIGGER IF EXISTS changelog_correction_guard ON changelog_correction;
CREATE TRIGGER changelog_correction_guard BEFORE UPDATE OR DELETE ON changelog_correction
  FOR EACH ROW EXECUTE FUNCTION changelog_correction_guard();
""".replace("{author}", SPARKOPS_AUTHOR.lower())
    .replace("{mark}", OBSERVED_MARK)
    .replace("{mark_len}", str(len(OBSERVED_MARK)))
)

_PG_POINTER = """
DROP TRIGGER IF EXISTS {table}_locks_entry ON {table};
CREATE TRIGGER {table}_locks_entry AFTER INSERT OR UPDATE OF entry_id ON {table}
  FOR EACH ROW WHEN (NEW.entry_id IS NOT NULL) EXECUTE FUNCTION changelog_lock_entry();
"""

_PG_CHILD = """
DROP TRIGGER IF EXISTS {table}_guard ON {table};
CREATE TRIGGER {table}_guard BEFORE INSERT OR UPDATE OR DELETE ON {table}
  FOR EACH ROW EXECUTE FUNCTION changelog_child_guard();
"""

_PG_DROP = """
DROP TRIGGER IF EXISTS changelog_entry_guard ON changelog_entry;
DROP TRIGGER IF EXISTS changelog_correction_guard ON changelog_correction;
{children}
DROP FUNCTION IF EXISTS changelog_lock_entry();
DROP FUNCTION IF EXISTS changelog_entry_guard();
DROP FUNCTION IF EXISTS changelog_correction_guard();
DROP FUNCTION IF EXISTS changelog_child_guard();
DROP FUNCTION IF EXISTS changelog_locked_entry_of(jsonb);
DROP FUNCTION IF EXISTS changelog_is_observed(jsonb);
"""

_SQLITE_LOCKED = "julianday({row}.locked_at) <= julianday('now')"
_SQLITE_ENTRY_LOCKED = (
    "EXISTS (SELECT 1 FROM changelog_entry e WHERE e.id = {expr} AND julianday(e.locked_at) <= julianday('now'))"
)
_SQLITE_OBSERVED = (
    f"(({{row}}.author_id IS NULL AND lower({{row}}.author_name) = '{SPARKOPS_AUTHOR.lower()}')"
    f" OR substr({{row}}.body_md, 1, {len(OBSERVED_MARK)}) = '{OBSERVED_MARK}')"
)
# Parts may be added to an unlocked entry, and to an observed one still being written.
_SQLITE_ENTRY_CLOSED = (
    "EXISTS (SELECT 1 FROM changelog_entry e WHERE e.id = {expr} AND julianday(e.locked_at) <= julianday('now')"
    f" AND NOT (e.fingerprint = '' AND {_SQLITE_OBSERVED.format(row='e')}))"
)
# Django's own text form of a datetime (UTC), to the millisecond.
_SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
_SQLITE_LOCK_ENTRY = (
    f"UPDATE changelog_entry SET locked_at = {_SQLITE_NOW}"
    " WHERE id = NEW.entry_id AND julianday(locked_at) > julianday('now');"
)


def _same_but_author(columns):
    return "NEW.author_id IS NULL AND " + " AND ".join(f'NEW."{c}" IS OLD."{c}"' for c in columns)


def _same_but_fingerprint(columns):
    return "NEW.author_id IS OLD.author_id AND " + " AND ".join(
        f'NEW."{c}" IS OLD."{c}"' for c in columns if c != "fingerprint"
    )


def _sqlite_statements(entry_columns, correction_columns, pointers):
    observed_new, observed_old = _SQLITE_OBSERVED.format(row="NEW"), _SQLITE_OBSERVED.format(row="OLD")
    out = [
        f"""CREATE TRIGGER changelog_entry_no_delete BEFORE DELETE ON changelog_entry
            WHEN {_SQLITE_LOCKED.format(row="OLD")}
            BEGIN SELECT RAISE(ABORT, 'append-only: a locked change-log entry is never deleted'); END""",
        """CREATE TRIGGER changelog_entry_no_extension BEFORE UPDATE ON changelog_entry
            WHEN julianday(NEW.locked_at) > julianday(OLD.locked_at)
            BEGIN SELECT RAISE(ABORT, 'append-only: an entry''s grace period cannot be extended'); END""",
        f"""CREATE TRIGGER changelog_entry_no_update BEFORE UPDATE ON changelog_entry
            WHEN {_SQLITE_LOCKED.format(row="OLD")} AND NOT ({_same_but_author(entry_columns)})
              AND NOT (OLD.fingerprint = '' AND {observed_old} AND {_same_but_fingerprint(entry_columns)})
            BEGIN SELECT RAISE(ABORT, 'append-only: a locked change-log entry is never changed; write a correction'); END""",
        f"""CREATE TRIGGER changelog_entry_observed_locked AFTER INSERT ON changelog_entry
            WHEN {observed_new} AND julianday(NEW.locked_at) > julianday(NEW.created_at)
            BEGIN UPDATE changelog_entry SET locked_at = NEW.created_at WHERE id = NEW.id; END""",
        f"""CREATE TRIGGER changelog_entry_observed_locks AFTER UPDATE ON changelog_entry
            WHEN {observed_new} AND julianday(NEW.locked_at) > julianday(NEW.created_at)
              AND NOT {_SQLITE_LOCKED.format(row="NEW")}
            BEGIN UPDATE changelog_entry SET locked_at = NEW.created_at WHERE id = NEW.id; END""",
        f"""CREATE TRIGGER changelog_correction_no_update BEFORE UPDATE ON changelog_correction
            WHEN NOT ({_same_but_author(correction_columns)})
            BEGIN SELECT RAISE(ABORT, 'append-only: a correction is never changed; write another correction'); END""",
        f"""CREATE TRIGGER changelog_correction_no_delete BEFORE DELETE ON changelog_correction
            WHEN {_SQLITE_ENTRY_LOCKED.format(expr="OLD.entry_id")}
            BEGIN SELECT RAISE(ABORT, 'append-only: a correction of a locked change-log entry is never deleted'); END""",
    ]
    for table in pointers:
        out += [
            f"""CREATE TRIGGER {table}_locks_entry AFTER INSERT ON {table} WHEN NEW.entry_id IS NOT NULL
                BEGIN {_SQLITE_LOCK_ENTRY} END""",
            f"""CREATE TRIGGER {table}_locks_entry_update AFTER UPDATE OF entry_id ON {table}
                WHEN NEW.entry_id IS NOT NULL BEGIN {_SQLITE_LOCK_ENTRY} END""",
        ]
    for table in CHILD_TABLES:
        old = _SQLITE_ENTRY_LOCKED.format(expr="OLD.entry_id")
        new = _SQLITE_ENTRY_LOCKED.format(expr="NEW.entry_id")
        if table == "changelog_evidencelink":
            via = _SQLITE_ENTRY_LOCKED.format(
                expr="(SELECT c.entry_id FROM changelog_correction c WHERE c.id = {row}.correction_id)"
            )
            old = f"({old} OR {via.format(row='OLD')})"
            new_upd = f"({new} OR {via.format(row='NEW')})"
        else:
            new_upd = new
        out += [
            f"""CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} WHEN {old}
                BEGIN SELECT RAISE(ABORT, 'append-only: part of a locked change-log entry cannot be deleted'); END""",
            f"""CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} WHEN {old} OR {new_upd}
                BEGIN SELECT RAISE(ABORT, 'append-only: part of a locked change-log entry cannot be changed'); END""",
            f"""CREATE TRIGGER {table}_no_insert BEFORE INSERT ON {table}
                WHEN {_SQLITE_ENTRY_CLOSED.format(expr="NEW.entry_id")}
                BEGIN SELECT RAISE(ABORT, 'append-only: a locked change-log entry cannot be added to'); END""",
        ]
    return out


def sqlite_trigger_names(pointers=POINTER_TABLES):
    names = [
        "changelog_entry_no_delete",
        "changelog_entry_no_extension",
        "changelog_entry_no_update",
        "changelog_entry_observed_locked",
        "changelog_entry_observed_locks",
        "changelog_correction_no_update",
        "changelog_correction_no_delete",
    ]
    names += [f"{t}_locks_entry{op}" for t in pointers for op in ("", "_update")]
    return names + [f"{t}_no_{op}" for t in CHILD_TABLES for op in ("delete", "update", "insert")]


def _pointers(schema_editor):
    """The tables that point at entries, of those the database has so far (migration 0003 and
    0004 run before the experiments app's tables may exist; 0006 runs after)."""
    tables = set(schema_editor.connection.introspection.table_names(schema_editor.connection.cursor()))
    return [t for t in POINTER_TABLES if t in tables]


def install(schema_editor, *, entry_columns=ENTRY_COLUMNS, correction_columns=CORRECTION_COLUMNS) -> None:
    """The column lists matter on SQLite only (PostgreSQL compares whole rows): pass those of
    the schema at the calling migration."""
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(
            _PG
            + "".join(_PG_CHILD.format(table=t) for t in CHILD_TABLES)
            + "".join(_PG_POINTER.format(table=t) for t in _pointers(schema_editor)),
            params=None,
        )
    elif vendor == "sqlite":
        for name in sqlite_trigger_names():
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")
        for statement in _sqlite_statements(entry_columns, correction_columns, _pointers(schema_editor)):
            schema_editor.execute(statement)
    # Other databases: the model and queryset guards still hold; SparkOps supports these two.


def uninstall(schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        children = "".join(f"DROP TRIGGER IF EXISTS {t}_guard ON {t};\n" for t in CHILD_TABLES)
        children += "".join(f"DROP TRIGGER IF EXISTS {t}_locks_entry ON {t};\n" for t in _pointers(schema_editor))
        schema_editor.execute(_PG_DROP.format(children=children), params=None)
    elif vendor == "sqlite":
        for name in sqlite_trigger_names():
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")
