/**
 * Versioned schema. Each entry runs once, in order, inside a transaction;
 * `PRAGMA user_version` records how many have been applied.
 * Money columns are integer micro-IDR (1 IDR = 1_000_000).
 */
export const migrations: string[] = [
  `
  CREATE TABLE accounts (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
    balance_micro INTEGER NOT NULL DEFAULT 0 CHECK (balance_micro >= 0),
    rpm_limit INTEGER NOT NULL DEFAULT 60,
    tier TEXT NOT NULL DEFAULT 'free',
    payg_enabled INTEGER NOT NULL DEFAULT 0,
    payg_limit_micro INTEGER NOT NULL DEFAULT 0,
    payg_window_seconds INTEGER NOT NULL DEFAULT 2592000,
    payg_window_start INTEGER NOT NULL DEFAULT 0,
    payg_spent_micro INTEGER NOT NULL DEFAULT 0,
    subscription_json TEXT,
    subscription_started_at INTEGER,
    config_hash TEXT,
    created_at INTEGER NOT NULL
  );

  CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    hash TEXT NOT NULL UNIQUE,
    prefix TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL CHECK (kind IN ('standard', 'login', 'shared')),
    parent_key_id TEXT REFERENCES api_keys(id),
    created_at INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at INTEGER
  );
  CREATE INDEX api_keys_account ON api_keys(account_id);
  CREATE INDEX api_keys_parent ON api_keys(parent_key_id);

  CREATE TABLE admin_keys (
    id TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
  );

  CREATE TABLE providers (
    id TEXT PRIMARY KEY,
    wire TEXT NOT NULL CHECK (wire IN ('openai', 'anthropic', 'mock')),
    base_url TEXT,
    api_keys_json TEXT NOT NULL DEFAULT '[]',
    timeout_ms INTEGER NOT NULL DEFAULT 60000,
    max_concurrency INTEGER,
    options_json TEXT NOT NULL DEFAULT '{}',
    responses_native INTEGER NOT NULL DEFAULT 0
  );

  CREATE TABLE models (
    name TEXT PRIMARY KEY,
    provider_id TEXT NOT NULL REFERENCES providers(id),
    upstream_model TEXT NOT NULL,
    modality TEXT NOT NULL,
    price_input_per_mtok INTEGER NOT NULL DEFAULT 0,
    price_output_per_mtok INTEGER NOT NULL DEFAULT 0,
    price_per_request INTEGER NOT NULL DEFAULT 0,
    price_per_unit INTEGER NOT NULL DEFAULT 0,
    subscribers_only INTEGER NOT NULL DEFAULT 0,
    context_window INTEGER NOT NULL DEFAULT 128000,
    max_output_tokens INTEGER NOT NULL DEFAULT 4096,
    free_token_budget INTEGER,
    free_token_window_seconds INTEGER,
    active INTEGER NOT NULL DEFAULT 1,
    created_at INTEGER NOT NULL
  );

  CREATE TABLE routes (
    name TEXT PRIMARY KEY,
    steps_json TEXT NOT NULL
  );

  CREATE TABLE tiers (
    name TEXT PRIMARY KEY,
    rank INTEGER NOT NULL DEFAULT 0,
    free_rpm INTEGER NOT NULL,
    free_daily INTEGER NOT NULL,
    burst_spacing_ms INTEGER NOT NULL DEFAULT 200,
    burst_queue INTEGER NOT NULL DEFAULT 8,
    min_topup_micro INTEGER
  );

  CREATE TABLE byok_credentials (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    provider_id TEXT NOT NULL REFERENCES providers(id),
    secret TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    position INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
  );
  CREATE INDEX byok_account ON byok_credentials(account_id, position);

  CREATE TABLE request_log (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    key_id TEXT,
    endpoint TEXT NOT NULL,
    model TEXT,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'settled', 'failed', 'interrupted')),
    payment TEXT NOT NULL DEFAULT 'none',
    payment_ref TEXT,
    reserved_micro INTEGER NOT NULL DEFAULT 0,
    cost_micro INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    status INTEGER,
    error_code TEXT,
    provider_id TEXT,
    stream INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    finished_at INTEGER
  );
  CREATE INDEX request_log_account_time ON request_log(account_id, created_at);
  CREATE INDEX request_log_open ON request_log(state) WHERE state = 'reserved';

  CREATE TABLE subscription_usage (
    account_id TEXT NOT NULL,
    window_name TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    used INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, window_name)
  );

  CREATE TABLE free_usage (
    account_id TEXT NOT NULL,
    day TEXT NOT NULL,
    used INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, day)
  );

  CREATE TABLE free_token_usage (
    model TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (model)
  );

  CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed')),
    input_json TEXT NOT NULL,
    result_json TEXT,
    media BLOB,
    media_type TEXT,
    error TEXT,
    request_id TEXT,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER
  );
  CREATE INDEX jobs_account ON jobs(account_id, kind, status);
  CREATE INDEX jobs_open ON jobs(status) WHERE status IN ('queued', 'running');

  CREATE TABLE device_codes (
    device_code_hash TEXT PRIMARY KEY,
    user_code TEXT NOT NULL UNIQUE,
    client_name TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'consumed')),
    account_id TEXT,
    key_id TEXT,
    key_value_sealed TEXT,
    interval_seconds INTEGER NOT NULL,
    last_poll_at INTEGER,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
  );

  CREATE TABLE sessions (
    token_hash TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    csrf_token TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
  );

  CREATE TABLE owner_links (
    token_hash TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    used_at INTEGER,
    created_at INTEGER NOT NULL
  );

  CREATE TABLE media (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    content_type TEXT NOT NULL,
    bytes BLOB NOT NULL,
    created_at INTEGER NOT NULL
  );
  `,
  // 2: request_log rows are only ever inserted whole (holds live in memory) and never looked up by
  // id, so the id's unique index and the index of open reservations are dropped: each commit on
  // the request path writes two fewer pages.
  `
  CREATE TABLE request_log_new (
    id TEXT NOT NULL,
    account_id TEXT NOT NULL,
    key_id TEXT,
    endpoint TEXT NOT NULL,
    model TEXT,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'settled', 'failed', 'interrupted')),
    payment TEXT NOT NULL DEFAULT 'none',
    payment_ref TEXT,
    reserved_micro INTEGER NOT NULL DEFAULT 0,
    cost_micro INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    status INTEGER,
    error_code TEXT,
    provider_id TEXT,
    stream INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    finished_at INTEGER
  );
  INSERT INTO request_log_new SELECT * FROM request_log ORDER BY rowid;
  DROP TABLE request_log;
  ALTER TABLE request_log_new RENAME TO request_log;
  CREATE INDEX request_log_account_time ON request_log(account_id, created_at);
  `,
  // 3: the running `gateway serve` leaves its address, owner account and pid here, so that
  // `gateway owner-link` can mint a fresh owner link for it from the same database file.
  `
  CREATE TABLE serve_runtime (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    url TEXT NOT NULL,
    owner_account_id TEXT,
    pid INTEGER NOT NULL,
    started_at INTEGER NOT NULL
  );
  `,
  // 4: the last settlement of the settlement journal (<db>-settlements) that the database holds,
  // written in the same transaction as the settlements themselves.
  `
  CREATE TABLE ledger_journal (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    applied_seq INTEGER NOT NULL
  );
  INSERT INTO ledger_journal (id, applied_seq) VALUES (1, 0);
  `,
  // 5: secrets leave the database in plain text. Provider API keys are kept in memory only (the
  // config is applied at every start), so only their number stays; BYOK credentials are sealed
  // with a key kept apart from the database (store/secret-box.ts), which start-up checks against
  // secret_key_check and uses to seal the rows still marked unsealed.
  `
  ALTER TABLE providers ADD COLUMN api_key_count INTEGER NOT NULL DEFAULT 0;
  UPDATE providers SET api_key_count = json_array_length(api_keys_json);
  ALTER TABLE providers DROP COLUMN api_keys_json;
  ALTER TABLE byok_credentials ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
  CREATE TABLE secret_key_check (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    value TEXT NOT NULL
  );
  `,
  // 6: the address that asked for each device code, so one client cannot take every pending slot.
  `
  ALTER TABLE device_codes ADD COLUMN client_ip TEXT NOT NULL DEFAULT '';
  CREATE INDEX device_codes_pending_by_ip ON device_codes(client_ip, status, expires_at);
  `,
  // 7: Anthropic message threads the gateway holds for models it translates to: each row is the
  // whole conversation up to the reply it is named by, for the account that had it.
  `
  CREATE TABLE message_threads (
    message_id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    conversation_json TEXT NOT NULL,
    expires_at INTEGER NOT NULL
  );
  CREATE INDEX message_threads_expiry ON message_threads(expires_at);
  `,
  // 8: a login request can be cancelled: its CLI said so (Ctrl-C) or stopped polling. SQLite
  // cannot change a CHECK, so the table is rebuilt (with 6's client_ip and its index).
  `
  CREATE TABLE device_codes_new (
    device_code_hash TEXT PRIMARY KEY,
    user_code TEXT NOT NULL UNIQUE,
    client_name TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'consumed', 'cancelled')),
    account_id TEXT,
    key_id TEXT,
    key_value_sealed TEXT,
    interval_seconds INTEGER NOT NULL,
    last_poll_at INTEGER,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    client_ip TEXT NOT NULL DEFAULT ''
  );
  INSERT INTO device_codes_new (device_code_hash, user_code, client_name, status, account_id,
    key_id, key_value_sealed, interval_seconds, last_poll_at, created_at, expires_at, client_ip)
  SELECT device_code_hash, user_code, client_name, status, account_id, key_id, key_value_sealed,
    interval_seconds, last_poll_at, created_at, expires_at, client_ip FROM device_codes;
  DROP TABLE device_codes;
  ALTER TABLE device_codes_new RENAME TO device_codes;
  CREATE INDEX device_codes_pending_by_ip ON device_codes(client_ip, status, expires_at);
  `,
  // 9: the tools a request was sent to its backend without (a hosted tool it cannot run), as a
  // JSON array of their names, null when nothing was left out; and a model's own choice between
  // leaving such a tool out and refusing the request, null to follow its provider.
  `
  ALTER TABLE request_log ADD COLUMN tools_omitted TEXT;
  ALTER TABLE models ADD COLUMN unsupported_tools TEXT;
  `,
  // 10: a running job is leased by the gateway that runs it, until a time on the wall clock it
  // keeps pushing back; a job whose lease ran out is taken over by whoever claims next.
  `
  ALTER TABLE jobs ADD COLUMN lease_owner TEXT;
  ALTER TABLE jobs ADD COLUMN lease_expires_at INTEGER;
  `,
  // 11: Responses API state (previous_response_id, retrieve, input items) and conversations,
  // per account, each row expiring. A response's row holds the answer as it was given and the
  // turn's own input items; a chain is walked through previous_response_id. A conversation's
  // items are numbered as they are added, which is their order.
  `
  CREATE TABLE stored_responses (
    account_id TEXT NOT NULL,
    id TEXT NOT NULL,
    previous_response_id TEXT,
    native_provider_id TEXT,
    response_json TEXT NOT NULL,
    input_items_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, id)
  );
  CREATE INDEX stored_responses_expiry ON stored_responses(expires_at);
  CREATE TABLE conversations (
    account_id TEXT NOT NULL,
    id TEXT NOT NULL,
    metadata_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, id)
  );
  CREATE INDEX conversations_expiry ON conversations(expires_at);
  CREATE TABLE conversation_items (
    seq INTEGER PRIMARY KEY,
    account_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    item_id TEXT NOT NULL,
    item_json TEXT NOT NULL,
    UNIQUE (account_id, conversation_id, item_id)
  );
  `,
  // 12: which stored response holds each item id, for an `item_reference` in a later request
  // (the AI SDK sends earlier assistant turns so while responses are stored).
  `
  CREATE TABLE response_items (
    account_id TEXT NOT NULL,
    item_id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    PRIMARY KEY (account_id, item_id)
  );
  CREATE INDEX response_items_response ON response_items(account_id, response_id);
  `,
  // 13: which wires a provider may speak is the gateway's registry's to say, not a CHECK fixed
  // when the table was made: the CHECK goes (SQLite cannot drop one, so the table is rebuilt)
  // and a trigger that every start writes from the registry takes its place (checkWires).
  `
  CREATE TABLE providers_new (
    id TEXT PRIMARY KEY,
    wire TEXT NOT NULL,
    base_url TEXT,
    timeout_ms INTEGER NOT NULL DEFAULT 60000,
    max_concurrency INTEGER,
    options_json TEXT NOT NULL DEFAULT '{}',
    responses_native INTEGER NOT NULL DEFAULT 0,
    api_key_count INTEGER NOT NULL DEFAULT 0
  );
  INSERT INTO providers_new (id, wire, base_url, timeout_ms, max_concurrency, options_json,
    responses_native, api_key_count)
  SELECT id, wire, base_url, timeout_ms, max_concurrency, options_json, responses_native,
    api_key_count FROM providers;
  DROP TABLE providers;
  ALTER TABLE providers_new RENAME TO providers;
  `,
  // 14: a request log row's state is checked against its four values one by one. Written as
  // `state IN (...)`, SQLite built a temporary index of the four values for every row inserted,
  // half the cost of the insert; a CHECK cannot be changed in place, so the table is rebuilt.
  `
  CREATE TABLE request_log_new (
    id TEXT NOT NULL,
    account_id TEXT NOT NULL,
    key_id TEXT,
    endpoint TEXT NOT NULL,
    model TEXT,
    state TEXT NOT NULL CHECK (
      state = 'reserved' OR state = 'settled' OR state = 'failed' OR state = 'interrupted'
    ),
    payment TEXT NOT NULL DEFAULT 'none',
    payment_ref TEXT,
    reserved_micro INTEGER NOT NULL DEFAULT 0,
    cost_micro INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    status INTEGER,
    error_code TEXT,
    provider_id TEXT,
    stream INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    finished_at INTEGER,
    tools_omitted TEXT
  );
  INSERT INTO request_log_new SELECT * FROM request_log ORDER BY rowid;
  DROP TABLE request_log;
  ALTER TABLE request_log_new RENAME TO request_log;
  CREATE INDEX request_log_account_time ON request_log(account_id, created_at);
  `,
  // 15: an item id may be held by more than one stored response (an \`item_reference\` resolved
  // into a later turn's input keeps the item's id): each holder has its row, so deleting one
  // leaves the item found through the others.
  `
  CREATE TABLE response_items_new (
    account_id TEXT NOT NULL,
    item_id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    PRIMARY KEY (account_id, item_id, response_id)
  );
  INSERT INTO response_items_new SELECT account_id, item_id, response_id FROM response_items;
  DROP TABLE response_items;
  ALTER TABLE response_items_new RENAME TO response_items;
  CREATE INDEX response_items_response ON response_items(account_id, response_id);
  `,
  // 16: when the provider refused an account's own key (and has not taken it since), for the
  // owner's list of their keys.
  `
  ALTER TABLE byok_credentials ADD COLUMN refused_at INTEGER;
  `,
  // 17: an account lists its jobs, newest first, and a request log row names the job its
  // submission queued (found by the job's request_id); a removed job keeps its row for that,
  // marked by when it was removed.
  `
  ALTER TABLE jobs ADD COLUMN deleted_at INTEGER;
  CREATE INDEX jobs_listing ON jobs(account_id, created_at);
  CREATE INDEX jobs_request ON jobs(request_id);
  `,
  // 18: a message thread is its account's: keyed on the account and the reply's id, so one
  // account's row is never replaced by, or handed to, another's under the same id. SQLite cannot
  // change a primary key, so the table is rebuilt (its columns in the same order).
  `
  CREATE TABLE message_threads_new (
    message_id TEXT NOT NULL,
    account_id TEXT NOT NULL,
    conversation_json TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (account_id, message_id)
  );
  INSERT INTO message_threads_new (message_id, account_id, conversation_json, expires_at)
  SELECT message_id, account_id, conversation_json, expires_at FROM message_threads;
  DROP TABLE message_threads;
  ALTER TABLE message_threads_new RENAME TO message_threads;
  CREATE INDEX message_threads_expiry ON message_threads(expires_at);
  `,
  // 19: a stored response's id is the gateway's own; the id a responses_native server gave it
  // (which that server may give again) is kept beside it, indexed to find the responses an id
  // given again takes from the server. Rows from before were stored under the server's id. And
  // the signed reasoning of an answer, kept for the chain where the client was not shown it.
  `
  ALTER TABLE stored_responses ADD COLUMN native_id TEXT;
  ALTER TABLE stored_responses ADD COLUMN signed_reasoning TEXT;
  UPDATE stored_responses SET native_id = id WHERE native_provider_id IS NOT NULL;
  CREATE INDEX stored_responses_native ON stored_responses(native_provider_id, native_id);
  `,
  // 20: a provider's base URL that carries a credential (a user and password, a query such as
  // \`?key=\`) is sealed like BYOK keys (store/provider-urls.ts), beside what may be shown of it;
  // its plain \`base_url\` is then null. Sealing needs the key, so start-up seals the rows still
  // plain (\`sealPlainBaseUrls\`), as step 5's BYOK rows were.
  `
  ALTER TABLE providers ADD COLUMN base_url_sealed TEXT;
  ALTER TABLE providers ADD COLUMN base_url_shown TEXT;
  `,
  // 21: a conversation item's kind: an item the client sees ('item'); the signed reasoning of a
  // turn's answer its client was not shown, replayed before that answer ('signed'); or where a
  // deleted item was, so that a page after it goes on from there ('deleted', its content gone).
  `
  ALTER TABLE conversation_items ADD COLUMN kind TEXT NOT NULL DEFAULT 'item';
  `,
  // 22: finished jobs past the retention are found by when they finished, among the jobs kept.
  `
  CREATE INDEX jobs_kept_finished ON jobs(finished_at)
    WHERE deleted_at IS NULL AND status IN ('completed', 'failed');
  `,
  // 23: an `item_reference` finds an item a conversation of the account holds (one added to it
  // alone, or of a `store: false` turn), by its id; and a response made on a conversation keeps
  // which conversation, how far into it its turn read (the last item's `seq`) and how many items,
  // for a turn continued from it with `previous_response_id`, which is sent those items first.
  `
  CREATE INDEX conversation_items_by_id ON conversation_items(account_id, item_id);
  ALTER TABLE stored_responses ADD COLUMN conversation_id TEXT;
  ALTER TABLE stored_responses ADD COLUMN conversation_seq INTEGER;
  ALTER TABLE stored_responses ADD COLUMN conversation_count INTEGER;
  `,
  // 24: a conversation deleted is marked (\`deleted_at\`, epoch ms) and its items are kept until it
  // would have expired: as on OpenAI, where deleting a conversation leaves its items, an
  // \`item_reference\` still finds them. Every route answers for it as for one it never held.
  `
  ALTER TABLE conversations ADD COLUMN deleted_at INTEGER;
  `,
  // 25: a job's progress, the share of its work done as its runner reports it (only rising); a
  // job completed before is done.
  `
  ALTER TABLE jobs ADD COLUMN progress INTEGER NOT NULL DEFAULT 0;
  UPDATE jobs SET progress = 100 WHERE status = 'completed';
  `,
  // 26: the model that served a request (a route's step), beside its provider: two steps on one
  // provider are told apart. Null on the rows before, and on a request nothing served.
  `
  ALTER TABLE request_log ADD COLUMN served_model TEXT;
  `,
];
