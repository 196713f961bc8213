import type pg from "pg";
import { postgresFunctions } from "./functions.js";

/**
 * The Postgres schema, as steps. Steps named by a number are the counterparts of SQLite's
 * migrations of that number (src/store/sqlite/migrations.ts): the same tables, columns and meaning, so a
 * Postgres database at step N holds what a SQLite file at user_version N holds. Money is bigint
 * micro-IDR and times are bigint milliseconds, as on SQLite; flags stay integers (0/1) so rows read
 * the same on both. Steps with a name are Postgres's own: what only a database shared by several
 * gateways needs. Each step runs once, in list order, in its own transaction; `schema_migrations`
 * records the steps applied. The steps make tables; the functions live in functions.ts and are
 * applied after them. Steps that only created functions stay, empty, so that their ids keep
 * meaning the same point in the history on every database.
 */
export interface MigrationStep {
  id: string;
  sql: string;
}

export const postgresMigrations: MigrationStep[] = [
  {
    id: "1",
    sql: `
  CREATE TABLE accounts (
    id text PRIMARY KEY,
    name text NOT NULL DEFAULT '',
    status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
    balance_micro bigint NOT NULL DEFAULT 0 CHECK (balance_micro >= 0),
    rpm_limit integer NOT NULL DEFAULT 60,
    tier text NOT NULL DEFAULT 'free',
    payg_enabled integer NOT NULL DEFAULT 0,
    payg_limit_micro bigint NOT NULL DEFAULT 0,
    payg_window_seconds integer NOT NULL DEFAULT 2592000,
    payg_window_start bigint NOT NULL DEFAULT 0,
    payg_spent_micro bigint NOT NULL DEFAULT 0,
    subscription_json text,
    subscription_started_at bigint,
    config_hash text,
    created_at bigint NOT NULL
  );

  CREATE TABLE api_keys (
    id text PRIMARY KEY,
    account_id text NOT NULL REFERENCES accounts(id),
    hash text NOT NULL UNIQUE,
    prefix text NOT NULL,
    label text NOT NULL DEFAULT '',
    kind text NOT NULL CHECK (kind IN ('standard', 'login', 'shared')),
    parent_key_id text REFERENCES api_keys(id),
    created_at bigint NOT NULL,
    last_used_at bigint,
    revoked_at bigint
  );
  CREATE INDEX api_keys_account ON api_keys(account_id);
  CREATE INDEX api_keys_parent ON api_keys(parent_key_id);

  CREATE TABLE admin_keys (
    id text PRIMARY KEY,
    hash text NOT NULL UNIQUE,
    created_at bigint NOT NULL
  );

  CREATE TABLE providers (
    id text PRIMARY KEY,
    wire text NOT NULL CHECK (wire IN ('openai', 'anthropic', 'mock')),
    base_url text,
    api_keys_json text NOT NULL DEFAULT '[]',
    timeout_ms integer NOT NULL DEFAULT 60000,
    max_concurrency integer,
    options_json text NOT NULL DEFAULT '{}',
    responses_native integer NOT NULL DEFAULT 0
  );

  CREATE TABLE models (
    name text PRIMARY KEY,
    provider_id text NOT NULL REFERENCES providers(id),
    upstream_model text NOT NULL,
    modality text NOT NULL,
    price_input_per_mtok bigint NOT NULL DEFAULT 0,
    price_output_per_mtok bigint NOT NULL DEFAULT 0,
    price_per_request bigint NOT NULL DEFAULT 0,
    price_per_unit bigint NOT NULL DEFAULT 0,
    subscribers_only integer NOT NULL DEFAULT 0,
    context_window integer NOT NULL DEFAULT 128000,
    max_output_tokens integer NOT NULL DEFAULT 4096,
    free_token_budget bigint,
    free_token_window_seconds integer,
    active integer NOT NULL DEFAULT 1,
    created_at bigint NOT NULL
  );

  CREATE TABLE routes (
    name text PRIMARY KEY,
    steps_json text NOT NULL
  );

  CREATE TABLE tiers (
    name text PRIMARY KEY,
    rank integer NOT NULL DEFAULT 0,
    free_rpm integer NOT NULL,
    free_daily integer NOT NULL,
    burst_spacing_ms integer NOT NULL DEFAULT 200,
    burst_queue integer NOT NULL DEFAULT 8,
    min_topup_micro bigint
  );

  CREATE TABLE byok_credentials (
    id text PRIMARY KEY,
    account_id text NOT NULL REFERENCES accounts(id),
    provider_id text NOT NULL REFERENCES providers(id),
    secret text NOT NULL,
    label text NOT NULL DEFAULT '',
    position integer NOT NULL DEFAULT 0,
    created_at bigint NOT NULL
  );
  CREATE INDEX byok_account ON byok_credentials(account_id, position);

  CREATE TABLE request_log (
    id text PRIMARY KEY,
    account_id text NOT NULL,
    key_id text,
    endpoint text NOT NULL,
    model text,
    state text NOT NULL CHECK (state IN ('reserved', 'settled', 'failed', 'interrupted')),
    payment text NOT NULL DEFAULT 'none',
    payment_ref text,
    reserved_micro bigint NOT NULL DEFAULT 0,
    cost_micro bigint NOT NULL DEFAULT 0,
    input_tokens bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    status integer,
    error_code text,
    provider_id text,
    stream integer NOT NULL DEFAULT 0,
    created_at bigint NOT NULL,
    finished_at bigint
  );
  CREATE INDEX request_log_account_time ON request_log(account_id, created_at);
  CREATE INDEX request_log_open ON request_log(state) WHERE state = 'reserved';

  CREATE TABLE subscription_usage (
    account_id text NOT NULL,
    window_name text NOT NULL,
    window_start bigint NOT NULL,
    used integer NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, window_name)
  );

  CREATE TABLE free_usage (
    account_id text NOT NULL,
    day text NOT NULL,
    used integer NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, day)
  );

  CREATE TABLE free_token_usage (
    model text NOT NULL,
    window_start bigint NOT NULL,
    tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (model)
  );

  CREATE TABLE jobs (
    id text PRIMARY KEY,
    account_id text NOT NULL,
    kind text NOT NULL,
    model text NOT NULL,
    status text NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed')),
    input_json text NOT NULL,
    result_json text,
    media bytea,
    media_type text,
    error text,
    request_id text,
    created_at bigint NOT NULL,
    started_at bigint,
    finished_at bigint
  );
  CREATE INDEX jobs_account ON jobs(account_id, kind, status);
  CREATE INDEX jobs_open ON jobs(status) WHERE status IN ('queued', 'running');

  CREATE TABLE device_codes (
    device_code_hash text PRIMARY KEY,
    user_code text NOT NULL UNIQUE,
    client_name text NOT NULL DEFAULT '',
    status text NOT NULL CONSTRAINT device_codes_status_check
      CHECK (status IN ('pending', 'approved', 'denied', 'consumed')),
    account_id text,
    key_id text,
    key_value_sealed text,
    interval_seconds integer NOT NULL,
    last_poll_at bigint,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL
  );

  CREATE TABLE sessions (
    token_hash text PRIMARY KEY,
    account_id text NOT NULL,
    csrf_token text NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL
  );

  CREATE TABLE owner_links (
    token_hash text PRIMARY KEY,
    account_id text NOT NULL,
    used_at bigint,
    created_at bigint NOT NULL
  );

  CREATE TABLE media (
    id text PRIMARY KEY,
    account_id text NOT NULL,
    content_type text NOT NULL,
    bytes bytea NOT NULL,
    created_at bigint NOT NULL
  );
  `,
  },
  {
    // SQLite rebuilt the table to lose these two indexes; Postgres drops them in place.
    id: "2",
    sql: `
  ALTER TABLE request_log DROP CONSTRAINT request_log_pkey;
  DROP INDEX request_log_open;
  `,
  },
  {
    id: "3",
    sql: `
  CREATE TABLE serve_runtime (
    id integer PRIMARY KEY CHECK (id = 1),
    url text NOT NULL,
    owner_account_id text,
    pid integer NOT NULL,
    started_at bigint NOT NULL
  );
  `,
  },
  {
    id: "4",
    sql: `
  CREATE TABLE ledger_journal (
    id integer PRIMARY KEY CHECK (id = 1),
    applied_seq bigint NOT NULL
  );
  INSERT INTO ledger_journal (id, applied_seq) VALUES (1, 0);
  `,
  },
  {
    id: "5",
    sql: `
  ALTER TABLE providers ADD COLUMN api_key_count integer NOT NULL DEFAULT 0;
  UPDATE providers SET api_key_count = json_array_length(api_keys_json::json);
  ALTER TABLE providers DROP COLUMN api_keys_json;
  ALTER TABLE byok_credentials ADD COLUMN sealed integer NOT NULL DEFAULT 0;
  CREATE TABLE secret_key_check (
    id integer PRIMARY KEY CHECK (id = 1),
    value text NOT NULL
  );
  `,
  },
  {
    id: "6",
    sql: `
  ALTER TABLE device_codes ADD COLUMN client_ip text NOT NULL DEFAULT '';
  CREATE INDEX device_codes_pending_by_ip ON device_codes(client_ip, status, expires_at);
  `,
  },
  {
    id: "7",
    sql: `
  CREATE TABLE message_threads (
    message_id text PRIMARY KEY,
    account_id text NOT NULL,
    conversation_json text NOT NULL,
    expires_at bigint NOT NULL
  );
  CREATE INDEX message_threads_expiry ON message_threads(expires_at);
  `,
  },
  {
    // SQLite rebuilt the table to change a CHECK; Postgres replaces the constraint.
    id: "8",
    sql: `
  ALTER TABLE device_codes DROP CONSTRAINT device_codes_status_check,
    ADD CONSTRAINT device_codes_status_check
      CHECK (status IN ('pending', 'approved', 'denied', 'consumed', 'cancelled'));
  `,
  },
  {
    id: "9",
    sql: `
  ALTER TABLE request_log ADD COLUMN tools_omitted text;
  ALTER TABLE models ADD COLUMN unsupported_tools text;
  `,
  },
  {
    // Holds live in the database, so that every gateway on it admits against the same money.
    // See money.ts for how they are taken, settled, released and reaped.
    id: "money-holds",
    sql: moneyHoldsSql(),
  },
  {
    id: "10",
    sql: `
  ALTER TABLE jobs ADD COLUMN lease_owner text, ADD COLUMN lease_expires_at bigint;
  `,
  },
  {
    // SQLite lists the request log newest first by its rowid; a Postgres table has no insertion
    // order of its own, so the rows are numbered as they are written.
    id: "request-log-order",
    sql: `
  ALTER TABLE request_log ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
  CREATE INDEX request_log_seq ON request_log(seq);
  `,
  },
  {
    // The limits' counters, shared so that a per-minute limit is one limit across every gateway.
    // See limit-counters.ts. Unlogged: a count lost with a crash of the server forgets at most a
    // window's requests, and a request never waits on the write-ahead log for one.
    id: "limit-counters",
    sql: `
  CREATE UNLOGGED TABLE limit_counts (
    key text NOT NULL,
    window_end bigint NOT NULL,
    count integer NOT NULL CHECK (count >= 0),
    PRIMARY KEY (key, window_end)
  );
  CREATE INDEX limit_counts_window_end ON limit_counts(window_end);

  -- Free-model burst spacing: the next free slot of each account and how many wait for theirs.
  CREATE UNLOGGED TABLE limit_slots (
    key text PRIMARY KEY,
    next_slot bigint NOT NULL,
    waiting integer NOT NULL DEFAULT 0 CHECK (waiting >= 0)
  );
  `,
  },
  {
    // A provider key that got 429 on one gateway cools on all. See key-cooldowns.ts.
    id: "provider-key-cooldowns",
    sql: providerKeyCooldownsSql(),
  },
  {
    // Several gateways serve one database: each prints its own owner link and keeps its own
    // serve record, so one's start neither spends another's link nor hides another's record.
    id: "per-instance-records",
    sql: `
  ALTER TABLE owner_links ADD COLUMN issuer text;
  CREATE TABLE serve_instances (
    host text NOT NULL,
    pid integer NOT NULL,
    url text NOT NULL,
    owner_account_id text,
    started_at bigint NOT NULL,
    PRIMARY KEY (host, pid)
  );
  `,
  },
  {
    // Settlements made while others are in flight, in one round trip and one transaction. See
    // Batches in money.ts. This step only created gateway_settle_all, now in functions.ts.
    id: "settle-all",
    sql: "",
  },
  {
    // Admission in one round trip: the account's per-minute count and the hold together, and
    // the holds placed while others are in flight in one statement. See Batches in money.ts.
    // This step only created gateway_hold_all, now in functions.ts.
    id: "hold-all",
    sql: "",
  },
  {
    // A gateway takes part of an account's balance and of its per-minute count ahead, and admits
    // the account's next requests from them without a round trip. See Leases in money.ts.
    id: "money-leases",
    sql: moneyLeasesSql(),
  },
  {
    // A lease in use grows before it runs out, outside any request. See Leases.topUpIfLow. This
    // step only created gateway_lease_top_up, now in functions.ts.
    id: "lease-top-up",
    sql: "",
  },
  {
    // Responses API state and conversations, as SQLite's step 11.
    id: "responses-state",
    sql: `
  CREATE TABLE stored_responses (
    account_id text NOT NULL,
    id text NOT NULL,
    previous_response_id text,
    native_provider_id text,
    response_json text NOT NULL,
    input_items_json text NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (account_id, id)
  );
  CREATE INDEX stored_responses_expiry ON stored_responses(expires_at);
  CREATE TABLE conversations (
    account_id text NOT NULL,
    id text NOT NULL,
    metadata_json text NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (account_id, id)
  );
  CREATE INDEX conversations_expiry ON conversations(expires_at);
  CREATE TABLE conversation_items (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id text NOT NULL,
    conversation_id text NOT NULL,
    item_id text NOT NULL,
    item_json text NOT NULL,
    UNIQUE (account_id, conversation_id, item_id)
  );
  `,
  },
  {
    // Which stored response holds each item id, as SQLite's step 12.
    id: "response-items",
    sql: `
  CREATE TABLE response_items (
    account_id text NOT NULL,
    item_id text NOT NULL,
    response_id text NOT NULL,
    PRIMARY KEY (account_id, item_id)
  );
  CREATE INDEX response_items_response ON response_items(account_id, response_id);
  `,
  },
  {
    // As SQLite's step 13: the wires a provider may speak are the registry's, checked by a
    // trigger every start writes (knownWiresSql), not by a CHECK fixed when the table was made.
    id: "wires-from-registry",
    sql: `
  ALTER TABLE providers DROP CONSTRAINT IF EXISTS providers_wire_check;
  `,
  },
  {
    // As SQLite's step 15: an item id may be held by more than one stored response.
    id: "response-items-per-holder",
    sql: `
  ALTER TABLE response_items DROP CONSTRAINT response_items_pkey;
  ALTER TABLE response_items ADD PRIMARY KEY (account_id, item_id, response_id);
  `,
  },
  {
    // As SQLite's step 16: when the provider refused an account's own key.
    id: "byok-refused-at",
    sql: `
  ALTER TABLE byok_credentials ADD COLUMN refused_at bigint;
  `,
  },
  {
    // gateway_settle and gateway_settle_leased take the payment the request log names (the
    // account's own key paid the provider, whatever the hold was): a new argument, which CREATE
    // OR REPLACE cannot add, so their old forms go and functions.ts defines the new ones.
    id: "settle-logged-payment",
    sql: `
  DROP FUNCTION IF EXISTS gateway_settle(text, boolean, bigint, text, text, text, bigint, bigint,
    integer, text, text, integer, bigint, text);
  DROP FUNCTION IF EXISTS gateway_settle_leased(text, text, text, bigint, boolean, boolean, bigint,
    text, text, text, bigint, bigint, integer, text, text, integer, bigint, bigint, text);
  `,
  },
  {
    // A stream's delivery mark: the settlement it gets should its gateway die before it settles,
    // written before the output it pays for goes out (PostgresMoney.markDelivery); its settlement
    // deletes it, a reaper settles it (gateway_settle_interrupted).
    id: "delivery-marks",
    sql: `
  CREATE TABLE deliveries (
    id text PRIMARY KEY,
    instance_id text NOT NULL,
    account_id text NOT NULL,
    settlement jsonb NOT NULL
  );
  CREATE INDEX deliveries_instance ON deliveries(instance_id);
  `,
  },
  {
    // As SQLite's step 17: an account lists its jobs, and a request log row names the job its
    // submission queued; a removed job keeps its row. `seq` orders the jobs of one millisecond
    // as they were written, as SQLite's rowid does.
    id: "job-listing",
    sql: `
  ALTER TABLE jobs ADD COLUMN deleted_at bigint;
  ALTER TABLE jobs ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
  CREATE INDEX jobs_listing ON jobs(account_id, created_at, seq);
  CREATE INDEX jobs_request ON jobs(request_id);
  `,
  },
  {
    // As SQLite's step 18: a message thread is keyed on its account and the reply's id.
    id: "message-threads-per-account",
    sql: `
  ALTER TABLE message_threads DROP CONSTRAINT message_threads_pkey;
  ALTER TABLE message_threads ADD PRIMARY KEY (account_id, message_id);
  `,
  },
  {
    // As SQLite's step 19: the id a native server gave a stored response, and the signed
    // reasoning kept for its chain.
    id: "responses-native-id",
    sql: `
  ALTER TABLE stored_responses ADD COLUMN native_id text;
  ALTER TABLE stored_responses ADD COLUMN signed_reasoning text;
  UPDATE stored_responses SET native_id = id WHERE native_provider_id IS NOT NULL;
  CREATE INDEX stored_responses_native ON stored_responses(native_provider_id, native_id);
  `,
  },
  {
    // As SQLite's step 20: a base URL carrying a credential is sealed; start-up seals plain rows.
    id: "provider-base-url-sealed",
    sql: `
  ALTER TABLE providers ADD COLUMN base_url_sealed text;
  ALTER TABLE providers ADD COLUMN base_url_shown text;
  `,
  },
  {
    // As SQLite's step 21: a conversation item's kind (shown, signed reasoning, deleted).
    id: "conversation-item-kinds",
    sql: `
  ALTER TABLE conversation_items ADD COLUMN kind text NOT NULL DEFAULT 'item';
  `,
  },
  {
    // As SQLite's step 22: finished jobs past the retention, by when they finished.
    id: "job-retention",
    sql: `
  CREATE INDEX jobs_kept_finished ON jobs(finished_at)
    WHERE deleted_at IS NULL AND status IN ('completed', 'failed');
  `,
  },
  {
    // As SQLite's step 23: a conversation's items found by id, and the conversation a response's
    // turn read, how far and how many items.
    id: "conversation-context",
    sql: `
  CREATE INDEX conversation_items_by_id ON conversation_items(account_id, item_id);
  ALTER TABLE stored_responses ADD COLUMN conversation_id text;
  ALTER TABLE stored_responses ADD COLUMN conversation_seq bigint;
  ALTER TABLE stored_responses ADD COLUMN conversation_count integer;
  `,
  },
  {
    // As SQLite's step 24: a conversation deleted is marked, its items kept for references.
    id: "conversation-deleted",
    sql: `
  ALTER TABLE conversations ADD COLUMN deleted_at bigint;
  `,
  },
  {
    // As SQLite's step 25: a job's progress, only rising; a job completed before is done.
    id: "job-progress",
    sql: `
  ALTER TABLE jobs ADD COLUMN progress integer NOT NULL DEFAULT 0;
  UPDATE jobs SET progress = 100 WHERE status = 'completed';
  `,
  },
  {
    // As SQLite's step 26: the model that served a request. gateway_settle and
    // gateway_settle_leased take it as a new argument, which CREATE OR REPLACE cannot add, so
    // their old forms go and functions.ts defines the new ones.
    id: "request-log-served-model",
    sql: `
  ALTER TABLE request_log ADD COLUMN served_model text;
  DROP FUNCTION IF EXISTS gateway_settle(text, boolean, bigint, text, text, text, bigint, bigint,
    integer, text, text, integer, bigint, text, text);
  DROP FUNCTION IF EXISTS gateway_settle_leased(text, text, text, bigint, boolean, boolean, bigint,
    text, text, text, bigint, bigint, integer, text, text, integer, bigint, bigint, text, text);
  `,
  },
  {
    // The units of a free model's budget a request holds while its provider works
    // (gateway_hold_budget): they go with the hold's row, however it ends.
    id: "holds-budget-units",
    sql: `
  ALTER TABLE holds ADD COLUMN budget_model text;
  ALTER TABLE holds ADD COLUMN budget_units bigint NOT NULL DEFAULT 0 CHECK (budget_units >= 0);
  CREATE INDEX holds_budget ON holds(budget_model) WHERE budget_model IS NOT NULL;
  `,
  },
];

/** The trigger function that refuses a provider row naming a wire not in `wires`. */
function knownWiresSql(wires: readonly string[]): string {
  const list = wires.map((wire) => `'${wire.replaceAll("'", "''")}'`).join(", ");
  return `
  CREATE OR REPLACE FUNCTION gateway_known_wire() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF NEW.wire NOT IN (${list}) THEN
      RAISE EXCEPTION 'providers.wire: not a wire this gateway speaks' USING ERRCODE = '23514';
    END IF;
    RETURN NEW;
  END $$;
  CREATE OR REPLACE TRIGGER providers_wire_known BEFORE INSERT OR UPDATE OF wire ON providers
    FOR EACH ROW EXECUTE FUNCTION gateway_known_wire();
  `;
}

/** Two gateways starting at once: the one that takes this lock migrates, the other waits. */
const migrationLockKey = 7_146_925_113_004_711_001n;

/**
 * Brings the database to the newest schema, under a session advisory lock so that concurrent
 * starts apply each step exactly once, then (re)defines every function of functions.ts. Returns
 * the ids of the steps this call applied.
 */
export async function migratePostgres(
  pool: pg.Pool,
  options: { wires?: readonly string[] } = {},
): Promise<string[]> {
  const client = await pool.connect();
  const applied: string[] = [];
  try {
    // A migration (or the wait for another instance's) may outlast the pool's statement bound.
    await client.query("SET statement_timeout = 0");
    await client.query("SELECT pg_advisory_lock($1)", [migrationLockKey.toString()]);
    try {
      await client.query(
        `CREATE TABLE IF NOT EXISTS schema_migrations (
           id text PRIMARY KEY,
           applied_at bigint NOT NULL
         )`,
      );
      const done = new Set(
        (await client.query<{ id: string }>("SELECT id FROM schema_migrations")).rows.map(
          (row) => row.id,
        ),
      );
      for (const step of postgresMigrations) {
        if (done.has(step.id)) continue;
        try {
          // One round trip a step, its transaction and its record included: a start on a loaded
          // machine waits on each round trip (a new database was 22 steps of four, and a start
          // was seen mid-migration when its 25 s ran out).
          await client.query(
            [
              "BEGIN",
              step.sql,
              `INSERT INTO schema_migrations (id, applied_at) VALUES (${sqlText(step.id)}, ${Date.now()})`,
              "COMMIT",
            ].join(";\n"),
          );
        } catch (err) {
          // A broken connection cannot roll back; the server does it when the session ends.
          await client.query("ROLLBACK").catch(() => {});
          throw new Error(`postgres migration ${step.id} failed: ${(err as Error).message}`);
        }
        applied.push(step.id);
      }
      await applyFunctions(client, options.wires ? [knownWiresSql(options.wires)] : []);
    } finally {
      await client.query("SELECT pg_advisory_unlock($1)", [migrationLockKey.toString()]);
    }
    await client.query("RESET statement_timeout");
    client.release();
  } catch (err) {
    // A connection left in an unknown state is closed rather than handed to the next caller.
    client.release(err as Error);
    throw err;
  }
  return applied;
}

/** Every start: a database migrated by an older gateway gets the functions' current text. */
async function applyFunctions(client: pg.PoolClient, more: string[]): Promise<void> {
  try {
    // One round trip for all of them (every start runs this, a restart's first of all).
    await client.query(["BEGIN", ...postgresFunctions, ...more, "COMMIT"].join(";\n"));
  } catch (err) {
    await client.query("ROLLBACK").catch(() => {});
    throw new Error(`postgres functions failed: ${(err as Error).message}`);
  }
}

/** A string as an SQL literal (the steps' ids, which are the code's own). */
function sqlText(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

function moneyHoldsSql(): string {
  return `
  -- Money and allowances that admitted, unsettled requests hold, next to what they hold against.
  ALTER TABLE accounts
    ADD COLUMN held_micro bigint NOT NULL DEFAULT 0 CHECK (held_micro >= 0),
    ADD COLUMN payg_held_micro bigint NOT NULL DEFAULT 0 CHECK (payg_held_micro >= 0);
  ALTER TABLE free_usage ADD COLUMN held integer NOT NULL DEFAULT 0 CHECK (held >= 0);
  ALTER TABLE subscription_usage ADD COLUMN held integer NOT NULL DEFAULT 0 CHECK (held >= 0);

  -- Gateways running on this database, each with a lease it renews; one whose lease ran out died.
  CREATE TABLE instances (
    id text PRIMARY KEY,
    host text NOT NULL DEFAULT '',
    pid integer,
    started_at bigint NOT NULL,
    lease_until bigint NOT NULL
  );

  -- One row per hold. instance_id names the gateway whose request holds it (null: a job's hold,
  -- which its job releases, wherever it runs); expires_at is a backstop on the database's clock.
  CREATE TABLE holds (
    id text PRIMARY KEY,
    account_id text NOT NULL,
    payment text NOT NULL CHECK (payment IN ('balance', 'payg', 'free', 'subscription')),
    amount_micro bigint NOT NULL DEFAULT 0 CHECK (amount_micro >= 0),
    payment_ref text,
    instance_id text,
    created_at bigint NOT NULL,
    expires_at bigint
  );
  CREATE INDEX holds_instance ON holds(instance_id);
  CREATE INDEX holds_expiry ON holds(expires_at) WHERE expires_at IS NOT NULL;
  `;
}

function providerKeyCooldownsSql(): string {
  return `
  -- A key is named by a short hash of its secret: the secrets themselves never reach the database.
  -- cooling_until is on the database's clock, which every gateway reads alike.
  CREATE UNLOGGED TABLE provider_key_cooldowns (
    provider_id text NOT NULL,
    fingerprint text NOT NULL,
    cooling_until bigint NOT NULL,
    PRIMARY KEY (provider_id, fingerprint)
  );
  `;
}

function moneyLeasesSql(): string {
  return `
  -- Money leased to gateways: part of held_micro, which every hold already leaves alone.
  ALTER TABLE accounts ADD COLUMN leased_micro bigint NOT NULL DEFAULT 0 CHECK (leased_micro >= 0);

  -- What one gateway holds ahead for one account's requests. money_micro is the lease's money,
  -- unused or held by the gateway's requests in flight. A gateway that stops using a lease gives
  -- back what it did not use and says how much its requests in flight still hold (kept_micro):
  -- a lease is drained when it is not active and holds no more than that. recall is set by a
  -- gateway refused while the account has undrained leases elsewhere; their owners give back.
  CREATE TABLE leases (
    instance_id text NOT NULL,
    account_id text NOT NULL,
    money_micro bigint NOT NULL DEFAULT 0 CHECK (money_micro >= 0),
    kept_micro bigint NOT NULL DEFAULT 0,
    active boolean NOT NULL DEFAULT true,
    recall boolean NOT NULL DEFAULT false,
    -- The per-minute count whose slots the lease took, if any.
    count_key text,
    PRIMARY KEY (instance_id, account_id)
  );
  CREATE INDEX leases_account ON leases(account_id);
  CREATE INDEX leases_count_key ON leases(count_key);

  -- gateway_hold_all and gateway_settle_all return more than they did before leases: a database
  -- that ran "settle-all" and "hold-all" with their functions (before functions.ts) has them with
  -- their old result, which CREATE OR REPLACE cannot change.
  DROP FUNCTION IF EXISTS gateway_hold_all(jsonb);
  DROP FUNCTION IF EXISTS gateway_settle_all(jsonb);
  `;
}
