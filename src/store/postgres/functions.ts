/**
 * The database's functions, each defined once, in its current text. migratePostgres applies them
 * all with CREATE OR REPLACE after the schema steps, under the migration lock, so a database
 * created today and one that ran every earlier step end with the same definitions.
 *
 * A function may only be changed here in a way CREATE OR REPLACE allows: the same argument types
 * and the same result type. One whose result or arguments change is dropped first by a new
 * schema step (DROP FUNCTION IF EXISTS: a new database does not have it yet); a schema step never
 * calls one of these, since on a new database they are created after every step.
 *
 * Lock order. Every function that changes an account's money, counts, holds or leases locks the
 * account's row first, then its per-minute counts, its holds, its subscription windows and free
 * day, then leases; several accounts in order of their ids. Two transactions that both want an
 * account's rows then queue at its row, and cannot each hold what the other waits for (a batch
 * whose holds fall in two minute windows did, between its second count and another gateway's
 * first). The row lock is FOR NO KEY UPDATE: the key share an insert referencing the account
 * takes (a hold, a request_log row) neither waits for it nor makes it wait.
 */
export const postgresFunctions: string[] = [
  `
  -- Leases and hold expiry use the database's clock: the gateways' clocks may disagree.
  CREATE OR REPLACE FUNCTION gateway_now_ms() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
  $$;
  `,
  `
  -- The start of the window of length seconds, counted from started, that holds now
  -- (subscriptionWindowStart in ledger.ts: floored, also before started).
  CREATE OR REPLACE FUNCTION gateway_window_start(started bigint, seconds bigint, now bigint)
  RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT started + floor((now - started)::numeric / (seconds * 1000))::bigint * (seconds * 1000)
  $$;
  `,
  `
  -- One more free-model request on the day, if the day's settled and held ones leave room.
  CREATE OR REPLACE FUNCTION gateway_take_free(p_account text, p_day text, p_limit integer)
  RETURNS boolean LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO free_usage AS usage (account_id, day, used, held)
    SELECT p_account, p_day, 0, 1 WHERE p_limit > 0
    ON CONFLICT (account_id, day) DO UPDATE SET held = usage.held + 1
      WHERE usage.used + usage.held < p_limit;
    RETURN FOUND;
  END $$;
  `,
  `
  -- Counts delivered tokens in a free model's budget, in the window that starts at p_window_start.
  -- The stored window never moves back: tokens of an older window (a stream's mark applied after
  -- the window rolled, a gateway whose clock is behind) count in the stored one, so no clock hands
  -- out more than the budget (the addFreeTokens statement of SqliteLedger).
  CREATE OR REPLACE FUNCTION gateway_count_free_tokens(p_model text, p_window_start bigint,
    p_tokens bigint)
  RETURNS void LANGUAGE sql AS $$
    INSERT INTO free_token_usage AS usage (model, window_start, tokens)
    VALUES (p_model, p_window_start, p_tokens)
    ON CONFLICT (model) DO UPDATE SET
      tokens = CASE WHEN excluded.window_start > usage.window_start THEN excluded.tokens
        ELSE usage.tokens + excluded.tokens END,
      window_start = GREATEST(usage.window_start, excluded.window_start)
  $$;
  `,
  `
  -- Holds p_units of p_model's budget for the request of hold p_hold (in place of what it held
  -- before), when the tokens counted in the window starting at p_window_start and the units every
  -- other hold holds leave some of p_budget; false when they leave none. The model's count row is
  -- locked first: holds of one budget are decided one at a time, on every gateway. A hold's units
  -- go with its row, deleted by its settlement (which counts what it spent in the same
  -- transaction), its release or the reaper.
  CREATE OR REPLACE FUNCTION gateway_hold_budget(p_hold text, p_model text,
    p_window_start bigint, p_budget bigint, p_units bigint)
  RETURNS boolean LANGUAGE plpgsql AS $$
  DECLARE
    counted bigint;
    held bigint;
  BEGIN
    INSERT INTO free_token_usage (model, window_start, tokens) VALUES (p_model, p_window_start, 0)
    ON CONFLICT (model) DO NOTHING;
    -- A window newer than p_window_start (another gateway's clock ahead) is the one running.
    SELECT CASE WHEN window_start >= p_window_start THEN tokens ELSE 0 END INTO counted
    FROM free_token_usage WHERE model = p_model FOR UPDATE;
    SELECT coalesce(sum(budget_units), 0) INTO held FROM holds
    WHERE budget_model = p_model AND id <> p_hold;
    IF counted + held >= p_budget THEN
      RETURN false;
    END IF;
    UPDATE holds SET budget_model = p_model, budget_units = p_units WHERE id = p_hold;
    RETURN true;
  END $$;
  `,
  `
  -- One more request in every window of the subscription, or in none. Returns the window starts
  -- counted as a JSON object (the request_log's payment_ref), or null when a window is full.
  -- The caller holds the account's row lock, so no other hold of the account interleaves.
  CREATE OR REPLACE FUNCTION gateway_take_windows(p_account text, p_started bigint, p_windows jsonb, p_now bigint)
  RETURNS text LANGUAGE plpgsql AS $$
  DECLARE
    item record;
    counted bigint;
    taken text[] := '{}';
    starts bigint[] := '{}';
  BEGIN
    FOR item IN
      SELECT entry->>'name' AS name, (entry->>'seconds')::bigint AS seconds,
        (entry->>'quota')::bigint AS quota
      FROM jsonb_array_elements(p_windows) WITH ORDINALITY AS listed(entry, position)
      ORDER BY position
    LOOP
      counted := NULL;
      -- A row of an earlier window starts over; one of a later window (a clock set back) is the
      -- window the request counts in.
      INSERT INTO subscription_usage AS usage (account_id, window_name, window_start, used, held)
      SELECT p_account, item.name, gateway_window_start(p_started, item.seconds, p_now), 0, 1
      WHERE item.quota > 0
      ON CONFLICT (account_id, window_name) DO UPDATE SET
        used = CASE WHEN usage.window_start < excluded.window_start THEN 0 ELSE usage.used END,
        held = CASE WHEN usage.window_start < excluded.window_start THEN 1 ELSE usage.held + 1 END,
        window_start = GREATEST(usage.window_start, excluded.window_start)
      WHERE CASE WHEN usage.window_start < excluded.window_start THEN 0
              ELSE usage.used + usage.held END < item.quota
      RETURNING window_start INTO counted;
      IF counted IS NULL THEN
        -- Taken back inside this transaction: nobody else ever sees the windows counted so far.
        UPDATE subscription_usage AS usage SET held = usage.held - 1
        FROM unnest(taken, starts) AS undo(name, start)
        WHERE usage.account_id = p_account AND usage.window_name = undo.name
          AND usage.window_start = undo.start;
        RETURN NULL;
      END IF;
      taken := taken || item.name;
      starts := starts || counted;
    END LOOP;
    -- The same text JSON.stringify gives for the object of starts, in the windows' order.
    RETURN '{' || coalesce((
      SELECT string_agg(to_json(name)::text || ':' || start, ',' ORDER BY position)
      FROM unnest(taken, starts) WITH ORDINALITY AS counted_windows(name, start, position)
    ), '') || '}';
  END $$;
  `,
  `
  -- Admission's hold, deciding as Ledger.reserve does: a free model counts the free daily
  -- allowance; a subscription model takes a request from every subscription window (falling back
  -- to PAYG or the free allowance as the plan says); otherwise the balance holds the worst case,
  -- then PAYG. Each hold is one conditional update that cannot overdraw, whatever other gateways
  -- do at the same time, and the hold's row is written in the same transaction.
  -- refusal is set instead of payment when the request cannot be admitted.
  CREATE OR REPLACE FUNCTION gateway_hold(
    p_hold text, p_account text, p_instance text, p_amount bigint, p_free boolean,
    p_subscription_model boolean, p_free_day text, p_free_limit integer, p_now bigint,
    p_ttl_ms bigint,
    OUT payment text, OUT reserved_micro bigint, OUT payment_ref text, OUT refusal text)
  LANGUAGE plpgsql AS $$
  DECLARE
    account accounts%ROWTYPE;
    plan jsonb;
    payg_on boolean;
  BEGIN
    reserved_micro := 0;
    IF p_free THEN
      IF NOT gateway_take_free(p_account, p_free_day, p_free_limit) THEN
        refusal := 'free_quota_daily';
        RETURN;
      END IF;
      payment := 'free';
      payment_ref := p_free_day;
    ELSIF p_subscription_model THEN
      SELECT * INTO account FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
      IF NOT FOUND THEN
        refusal := 'account_missing';
        RETURN;
      END IF;
      plan := account.subscription_json::jsonb;
      IF plan IS NOT NULL THEN
        payment_ref := gateway_take_windows(p_account,
          coalesce(account.subscription_started_at, account.created_at), plan->'windows', p_now);
        IF payment_ref IS NOT NULL THEN
          payment := 'subscription';
        ELSIF NOT coalesce((plan->>'payg_fallback')::boolean, false) THEN
          IF NOT coalesce((plan->>'free_fallback')::boolean, false) THEN
            refusal := 'plan_limit_reached';
            RETURN;
          END IF;
          IF NOT gateway_take_free(p_account, p_free_day, p_free_limit) THEN
            refusal := 'free_quota_daily';
            RETURN;
          END IF;
          payment := 'free';
          payment_ref := p_free_day;
        END IF;
      END IF;
    END IF;

    IF payment IS NULL THEN
      UPDATE accounts SET held_micro = held_micro + p_amount
      WHERE id = p_account AND balance_micro - held_micro >= p_amount;
      IF FOUND THEN
        payment := 'balance';
      ELSE
        -- A PAYG window that has run out starts over, whether or not this request fits in it.
        UPDATE accounts SET
          payg_window_start = gateway_window_start(payg_window_start, payg_window_seconds, p_now),
          payg_spent_micro = 0
        WHERE id = p_account AND payg_enabled <> 0
          AND p_now >= payg_window_start + payg_window_seconds * 1000::bigint;
        UPDATE accounts SET payg_held_micro = payg_held_micro + p_amount
        WHERE id = p_account AND payg_enabled <> 0
          AND payg_spent_micro + payg_held_micro + p_amount <= payg_limit_micro;
        IF FOUND THEN
          payment := 'payg';
        ELSE
          SELECT payg_enabled <> 0 INTO payg_on FROM accounts WHERE id = p_account;
          refusal := CASE WHEN payg_on IS NULL THEN 'account_missing'
            WHEN payg_on THEN 'payg_limit_reached' ELSE 'insufficient_balance' END;
          RETURN;
        END IF;
      END IF;
      reserved_micro := p_amount;
      payment_ref := NULL;
    END IF;

    INSERT INTO holds (id, account_id, payment, amount_micro, payment_ref, instance_id,
      created_at, expires_at)
    VALUES (p_hold, p_account, payment, reserved_micro, payment_ref, p_instance, p_now,
      CASE WHEN p_ttl_ms IS NULL THEN NULL ELSE gateway_now_ms() + p_ttl_ms END);
  END $$;
  `,
  `
  -- Gives back what a hold (already deleted by the caller) took, charging up to its amount when
  -- the request delivered. A charge never takes the balance below zero (an operator may have
  -- lowered it under the hold meanwhile). Returns what was charged.
  CREATE OR REPLACE FUNCTION gateway_unhold(h holds, p_delivered boolean, p_cost bigint)
  RETURNS bigint LANGUAGE plpgsql AS $$
  DECLARE
    charge bigint := CASE WHEN p_delivered THEN LEAST(GREATEST(p_cost, 0), h.amount_micro) ELSE 0 END;
    balance bigint;
    counted record;
  BEGIN
    IF h.payment = 'balance' THEN
      SELECT balance_micro INTO balance FROM accounts WHERE id = h.account_id FOR NO KEY UPDATE;
      charge := LEAST(charge, coalesce(balance, 0));
      UPDATE accounts SET held_micro = held_micro - h.amount_micro,
        balance_micro = balance_micro - charge
      WHERE id = h.account_id;
    ELSIF h.payment = 'payg' THEN
      -- The charge counts in the account's PAYG window as it stands, as Ledger.settle counts it.
      UPDATE accounts SET payg_held_micro = payg_held_micro - h.amount_micro,
        payg_spent_micro = payg_spent_micro + charge
      WHERE id = h.account_id;
    ELSIF h.payment = 'free' THEN
      UPDATE free_usage SET held = held - 1,
        used = used + CASE WHEN p_delivered THEN 1 ELSE 0 END
      WHERE account_id = h.account_id AND day = h.payment_ref;
    ELSIF h.payment = 'subscription' THEN
      -- A window that has rolled over since started its count again without this hold.
      FOR counted IN SELECT key, value::bigint AS start FROM json_each_text(h.payment_ref::json) LOOP
        UPDATE subscription_usage SET held = held - 1,
          used = used + CASE WHEN p_delivered THEN 1 ELSE 0 END
        WHERE account_id = h.account_id AND window_name = counted.key
          AND window_start = counted.start;
      END LOOP;
    END IF;
    RETURN charge;
  END $$;
  `,
  `
  -- Settlement in one transaction: the hold is deleted (so a second settlement, or the reaper,
  -- finds nothing to do), the real cost charged, the rest released, the request_log row written.
  -- The row names the hold's payment unless p_logged_payment says otherwise ('byok': the
  -- account's own provider key served the request, whatever the hold was; then the hold is given
  -- back whole, charged nothing and counted in no window or free day, as Ledger.settle does).
  -- Returns the charge, or null when the hold was already gone.
  CREATE OR REPLACE FUNCTION gateway_settle(
    p_hold text, p_delivered boolean, p_cost bigint, p_key_id text, p_endpoint text,
    p_model text, p_input_tokens bigint, p_output_tokens bigint, p_status integer,
    p_error_code text, p_provider_id text, p_stream integer, p_now bigint, p_tools_omitted text,
    p_logged_payment text, p_served_model text)
  RETURNS bigint LANGUAGE plpgsql AS $$
  DECLARE
    h holds%ROWTYPE;
    charge bigint;
  BEGIN
    PERFORM 1 FROM accounts WHERE id = (SELECT account_id FROM holds WHERE id = p_hold)
    FOR NO KEY UPDATE;
    DELETE FROM deliveries WHERE id = p_hold;
    DELETE FROM holds WHERE id = p_hold RETURNING * INTO h;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
    charge := gateway_unhold(h, p_delivered AND p_logged_payment IS DISTINCT FROM 'byok', p_cost);
    INSERT INTO request_log (id, account_id, key_id, endpoint, model, state, payment, payment_ref,
      reserved_micro, cost_micro, input_tokens, output_tokens, status, error_code, provider_id,
      stream, created_at, finished_at, tools_omitted, served_model)
    VALUES (h.id, h.account_id, p_key_id, p_endpoint, p_model,
      CASE WHEN p_delivered THEN 'settled' ELSE 'failed' END,
      coalesce(p_logged_payment, h.payment), h.payment_ref, h.amount_micro, charge, p_input_tokens,
      p_output_tokens, p_status, p_error_code, p_provider_id, p_stream, h.created_at, p_now,
      p_tools_omitted, p_served_model);
    RETURN charge;
  END $$;
  `,
  `
  -- A hold given back without a request to record (a refusal after admission, the reaper). A
  -- stream's hold that delivered output (it has a delivery mark) is settled as its mark says.
  CREATE OR REPLACE FUNCTION gateway_release(p_hold text) RETURNS boolean LANGUAGE plpgsql AS $$
  DECLARE
    h holds%ROWTYPE;
  BEGIN
    PERFORM 1 FROM accounts WHERE id = (SELECT account_id FROM holds WHERE id = p_hold)
    FOR NO KEY UPDATE;
    IF EXISTS (SELECT 1 FROM deliveries WHERE id = p_hold) THEN
      IF gateway_settle_interrupted(p_hold) THEN
        RETURN true;
      END IF;
    END IF;
    DELETE FROM holds WHERE id = p_hold RETURNING * INTO h;
    IF NOT FOUND THEN
      RETURN false;
    END IF;
    PERFORM gateway_unhold(h, false, 0);
    RETURN true;
  END $$;
  `,
  `
  -- Cools a key for p_ms from now (a longer cooldown already running stays) and tells every
  -- listening gateway in the same transaction: the notification carries the time left, so no
  -- gateway compares its own clock with another's. Cooldowns that ran out are forgotten here,
  -- where they are rare.
  CREATE OR REPLACE FUNCTION gateway_cool_key(p_provider text, p_fingerprint text, p_ms bigint)
  RETURNS void LANGUAGE plpgsql AS $$
  DECLARE
    until bigint;
  BEGIN
    DELETE FROM provider_key_cooldowns WHERE cooling_until < gateway_now_ms();
    INSERT INTO provider_key_cooldowns AS cooldown (provider_id, fingerprint, cooling_until)
    VALUES (p_provider, p_fingerprint, gateway_now_ms() + GREATEST(p_ms, 0))
    ON CONFLICT (provider_id, fingerprint) DO UPDATE
      SET cooling_until = GREATEST(cooldown.cooling_until, excluded.cooling_until)
    RETURNING cooling_until INTO until;
    PERFORM pg_notify('gateway_key_cooldowns', json_build_object(
      'provider', p_provider, 'fingerprint', p_fingerprint,
      'ms', GREATEST(until - gateway_now_ms(), 0))::text);
  END $$;
  `,
  `
  -- A count refused outside a hold (a shared key's) while leases of its key are not drained: they
  -- are asked to give back (recall), and the refusal may change once they have.
  -- True also when the window has room again (a give-back committed since the refusal).
  CREATE OR REPLACE FUNCTION gateway_recall_count(p_key text, p_window_end bigint, p_limit integer)
  RETURNS boolean LANGUAGE plpgsql AS $$
  BEGIN
    PERFORM 1 FROM accounts
    WHERE id IN (SELECT account_id FROM leases WHERE count_key = p_key)
    ORDER BY id FOR NO KEY UPDATE;
    UPDATE leases SET recall = true
    WHERE count_key = p_key AND (active OR money_micro > kept_micro);
    RETURN FOUND OR EXISTS (SELECT 1 FROM limit_counts
      WHERE key = p_key AND window_end = p_window_end AND count < p_limit);
  END $$;
  `,
  `
  -- Gives back what a gateway's lease did not use: money, and per-minute slots of one window. The
  -- lease stops; its requests in flight still hold p_kept. Rows are locked in the order the holds
  -- lock them: the account, then the count, then the lease.
  CREATE OR REPLACE FUNCTION gateway_lease_give_back(p_instance text, p_account text, p_micro bigint,
    p_kept bigint, p_count_key text, p_window_end bigint, p_count integer)
  RETURNS void LANGUAGE plpgsql AS $$
  DECLARE
    leased bigint;
    given bigint;
  BEGIN
    PERFORM 1 FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    IF p_count > 0 THEN
      UPDATE limit_counts SET count = GREATEST(count - p_count, 0)
      WHERE key = p_count_key AND window_end = p_window_end;
    END IF;
    SELECT money_micro INTO leased FROM leases
    WHERE instance_id = p_instance AND account_id = p_account FOR UPDATE;
    IF NOT FOUND THEN
      RETURN;
    END IF;
    given := LEAST(GREATEST(p_micro, 0), leased);
    UPDATE accounts SET held_micro = held_micro - given, leased_micro = leased_micro - given
    WHERE id = p_account;
    UPDATE leases SET money_micro = money_micro - given, kept_micro = GREATEST(p_kept, 0),
      active = false, recall = false
    WHERE instance_id = p_instance AND account_id = p_account;
  END $$;
  `,
  `
  -- A gateway's give-backs (each as gateway_lease_give_back) and then the accounts another
  -- gateway asked it to give back.
  CREATE OR REPLACE FUNCTION gateway_lease_tick(p_instance text, p_give_backs jsonb)
  RETURNS TABLE (account_id text) LANGUAGE plpgsql AS $$
  DECLARE
    g record;
  BEGIN
    FOR g IN
      SELECT * FROM jsonb_to_recordset(p_give_backs) AS give_back(account_id text, micro bigint,
        kept bigint, count_key text, window_end bigint, count integer)
      ORDER BY give_back.account_id
    LOOP
      PERFORM gateway_lease_give_back(p_instance, g.account_id, g.micro, g.kept, g.count_key,
        g.window_end, g.count);
    END LOOP;
    RETURN QUERY SELECT leases.account_id FROM leases
      WHERE leases.instance_id = p_instance AND leases.recall;
  END $$;
  `,
  `
  -- The lease of a gateway that died: its money goes back to its account, once the streams it
  -- paid for that delivered output are charged as their delivery marks say.
  CREATE OR REPLACE FUNCTION gateway_lease_reap(p_instance text, p_account text)
  RETURNS boolean LANGUAGE plpgsql AS $$
  DECLARE
    leased bigint;
  BEGIN
    PERFORM 1 FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    PERFORM gateway_settle_interrupted(id) FROM deliveries
    WHERE instance_id = p_instance AND account_id = p_account;
    DELETE FROM leases WHERE instance_id = p_instance AND account_id = p_account
    RETURNING money_micro INTO leased;
    IF NOT FOUND THEN
      RETURN false;
    END IF;
    UPDATE accounts SET held_micro = held_micro - leased, leased_micro = leased_micro - leased
    WHERE id = p_account;
    RETURN true;
  END $$;
  `,
  `
  -- Places each hold of p_holds as gateway_hold does, first taking one from its per-minute count
  -- when it names one (limit_key): a request over the limit holds nothing and is refused with
  -- 'rate_limited', and one refused for its money keeps its count. A window's first request
  -- forgets its key's windows long past, so counts taken only here are swept without a sweep of
  -- their own. A hold placed that asks for a lease (want_micro, want_count) leases that much more
  -- to its gateway while the account stays far from its limits: its available money at least four
  -- times the lease after it, and its window's count at least four leases below the limit; never
  -- with PAYG on. A hold refused for its balance or its count tells whether another gateway (or
  -- this one) has a lease of the account that is not drained (they are asked to give back), or
  -- whether a give-back has just made room: either way the refusal may change, and the caller
  -- tries again (recalled). Returns each one's answer by its position in the batch. Holds are
  -- placed by account, and within an account as they came, a free model's after the others, the
  -- account's row locked before any of them (see Lock order above).
  CREATE OR REPLACE FUNCTION gateway_hold_all(p_holds jsonb)
  RETURNS TABLE ("position" integer, payment text, reserved_micro bigint, payment_ref text,
    refusal text, lease_micro bigint, lease_count integer, recalled boolean)
  LANGUAGE plpgsql AS $$
  DECLARE
    h record;
    counted integer;
    locked text;
  BEGIN
    FOR h IN
      SELECT * FROM jsonb_to_recordset(p_holds) AS hold(
        "position" integer, id text, account_id text, instance_id text, amount bigint,
        free boolean, subscription_model boolean, free_day text, free_limit integer, now bigint,
        ttl_ms bigint, limit_key text, limit_window_end bigint, limit_count integer,
        limit_forget_before bigint, want_micro bigint, want_count integer)
      ORDER BY hold.account_id, hold.free, hold."position"
    LOOP
      "position" := h."position";
      payment := NULL;
      reserved_micro := 0;
      payment_ref := NULL;
      refusal := NULL;
      lease_micro := 0;
      lease_count := 0;
      recalled := false;
      counted := NULL;
      IF locked IS DISTINCT FROM h.account_id THEN
        PERFORM 1 FROM accounts WHERE id = h.account_id FOR NO KEY UPDATE;
        locked := h.account_id;
      END IF;
      IF h.limit_key IS NOT NULL THEN
        IF h.limit_count > 0 THEN
          INSERT INTO limit_counts AS window_count (key, window_end, count)
          VALUES (h.limit_key, h.limit_window_end, 1)
          ON CONFLICT (key, window_end) DO UPDATE SET count = window_count.count + 1
            WHERE window_count.count < h.limit_count
          RETURNING window_count.count INTO counted;
        END IF;
        IF counted IS NULL THEN
          refusal := 'rate_limited';
        ELSIF counted = 1 THEN
          DELETE FROM limit_counts
          WHERE key = h.limit_key AND window_end < h.limit_forget_before;
        END IF;
      END IF;
      IF refusal IS NULL THEN
        SELECT placed.payment, placed.reserved_micro, placed.payment_ref, placed.refusal
        INTO payment, reserved_micro, payment_ref, refusal
        FROM gateway_hold(h.id, h.account_id, h.instance_id, h.amount, h.free,
          h.subscription_model, h.free_day, h.free_limit, h.now, h.ttl_ms) AS placed;
      END IF;
      IF refusal IS NULL AND payment = 'balance' AND coalesce(h.want_micro, 0) > 0 THEN
        -- The count's row is this transaction's already: taking more of it waits on nothing.
        IF counted IS NOT NULL AND coalesce(h.want_count, 0) > 0 THEN
          UPDATE limit_counts SET count = count + h.want_count
          WHERE key = h.limit_key AND window_end = h.limit_window_end
            AND count + 5 * h.want_count <= h.limit_count;
          IF FOUND THEN
            lease_count := h.want_count;
          END IF;
        END IF;
        -- Not with PAYG on: a balance short because of a lease elsewhere would send a request to
        -- PAYG instead of being refused and tried again once the lease is back.
        UPDATE accounts SET held_micro = held_micro + h.want_micro,
          leased_micro = leased_micro + h.want_micro
        WHERE id = h.account_id AND payg_enabled = 0
          AND balance_micro - held_micro - h.want_micro >= 4 * h.want_micro;
        IF FOUND THEN
          lease_micro := h.want_micro;
        ELSIF lease_count > 0 THEN
          UPDATE limit_counts SET count = count - lease_count
          WHERE key = h.limit_key AND window_end = h.limit_window_end;
          lease_count := 0;
        END IF;
        IF lease_micro > 0 THEN
          INSERT INTO leases AS lease (instance_id, account_id, money_micro, count_key)
          VALUES (h.instance_id, h.account_id, lease_micro,
            CASE WHEN lease_count > 0 THEN h.limit_key END)
          ON CONFLICT (instance_id, account_id) DO UPDATE SET
            money_micro = lease.money_micro + excluded.money_micro, active = true, recall = false,
            count_key = coalesce(excluded.count_key, lease.count_key);
        END IF;
      ELSIF refusal IN ('insufficient_balance', 'rate_limited') THEN
        -- A give-back may be committing right now: the account's row lock waits for it, and what
        -- it gave back is then seen below. Either way the request is tried again.
        PERFORM 1 FROM accounts WHERE id = h.account_id FOR NO KEY UPDATE;
        UPDATE leases SET recall = true
        WHERE leases.account_id = h.account_id AND (active OR money_micro > kept_micro);
        recalled := FOUND
          OR (refusal = 'insufficient_balance' AND EXISTS (SELECT 1 FROM accounts
            WHERE id = h.account_id AND balance_micro - held_micro >= h.amount))
          OR (refusal = 'rate_limited' AND EXISTS (SELECT 1 FROM limit_counts
            WHERE key = h.limit_key AND window_end = h.limit_window_end
              AND count < h.limit_count));
      END IF;
      RETURN NEXT;
    END LOOP;
  END $$;
  `,
  `
  -- Settles a request a gateway admitted from its lease: the charge comes out of the lease and
  -- the balance; what the request held beyond it stays in the lease, unless the gateway had
  -- stopped using it (p_stopped): then it goes back to the account, and the lease keeps less
  -- for the requests still in flight. The request_log row is written as gateway_settle writes
  -- it, its payment 'balance' unless p_logged_payment names another ('byok': charged nothing). A
  -- request whose lease is gone (its gateway was taken for dead) is charged nothing and not
  -- recorded here, as one whose hold was reaped: null (gateway_settle_all then settles it late).
  CREATE OR REPLACE FUNCTION gateway_settle_leased(p_id text, p_account text, p_instance text,
    p_reserved bigint, p_stopped boolean, p_delivered boolean, p_cost bigint, p_key_id text,
    p_endpoint text, p_model text, p_input_tokens bigint, p_output_tokens bigint,
    p_status integer, p_error_code text, p_provider_id text, p_stream integer,
    p_created_at bigint, p_now bigint, p_tools_omitted text, p_logged_payment text,
    p_served_model text)
  RETURNS bigint LANGUAGE plpgsql AS $$
  DECLARE
    balance bigint;
    leased bigint;
    charge bigint;
    back bigint;
  BEGIN
    SELECT balance_micro INTO balance FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    DELETE FROM deliveries WHERE id = p_id;
    SELECT money_micro INTO leased FROM leases
    WHERE instance_id = p_instance AND account_id = p_account FOR UPDATE;
    IF leased IS NULL OR balance IS NULL THEN
      RETURN NULL;
    END IF;
    charge := LEAST(CASE WHEN p_delivered AND p_logged_payment IS DISTINCT FROM 'byok'
      THEN LEAST(GREATEST(p_cost, 0), p_reserved) ELSE 0 END, balance, leased);
    back := CASE WHEN p_stopped THEN LEAST(p_reserved, leased) ELSE charge END;
    UPDATE accounts SET balance_micro = balance_micro - charge,
      held_micro = held_micro - back, leased_micro = leased_micro - back
    WHERE id = p_account;
    UPDATE leases SET money_micro = money_micro - back,
      kept_micro = CASE WHEN p_stopped THEN GREATEST(kept_micro - p_reserved, 0) ELSE kept_micro END
    WHERE instance_id = p_instance AND account_id = p_account;
    INSERT INTO request_log (id, account_id, key_id, endpoint, model, state, payment, payment_ref,
      reserved_micro, cost_micro, input_tokens, output_tokens, status, error_code, provider_id,
      stream, created_at, finished_at, tools_omitted, served_model)
    VALUES (p_id, p_account, p_key_id, p_endpoint, p_model,
      CASE WHEN p_delivered THEN 'settled' ELSE 'failed' END,
      coalesce(p_logged_payment, 'balance'), NULL, p_reserved, charge, p_input_tokens,
      p_output_tokens, p_status, p_error_code, p_provider_id, p_stream, p_created_at, p_now,
      p_tools_omitted, p_served_model);
    RETURN charge;
  END $$;
  `,
  `
  -- A delivered paid answer whose hold or lease is gone: its gateway was taken as dead while it
  -- worked (frozen past its lease), and the reaper released what it held, charging a stream's
  -- delivery mark. The answer is charged as its hold would have charged it (what was reported, at
  -- most what it held), if the account can still pay: one conditional update, as a hold is placed
  -- (the balance's available money, the PAYG limit, every subscription window still running with
  -- room). A stream whose mark the reaper charged already has its row: the difference is charged
  -- (or given back, where the mark charged more), and its row says what it finished with. Returns
  -- the charge in all, or -1 when the account cannot pay: a whole answer is then recorded as the
  -- 503 storage_unavailable its client gets, charged nothing; a stream keeps its mark's row. The
  -- caller holds the account's row lock.
  CREATE OR REPLACE FUNCTION gateway_settle_late(s jsonb) RETURNS bigint
  LANGUAGE plpgsql AS $$
  DECLARE
    v_account text := s->>'account_id';
    v_payment text := coalesce(s->>'payment', 'balance');
    v_ref text := s->>'payment_ref';
    created bigint := (s->>'created_at')::bigint;
    now_ms bigint := (s->>'now')::bigint;
    -- A settlement written before late answers were charged names no hold: it charges nothing.
    v_held bigint := coalesce((s->>'reserved')::bigint, 0);
    charge bigint := LEAST(GREATEST((s->>'cost')::bigint, 0), v_held);
    logged_state text;
    logged_cost bigint;
    logged_payment text;
    extra bigint;
    paid boolean;
    plan jsonb;
    counted record;
  BEGIN
    SELECT state, cost_micro, payment INTO logged_state, logged_cost, logged_payment
    FROM request_log WHERE account_id = v_account AND created_at = created AND id = s->>'id';
    IF FOUND THEN
      -- Settled already (a second settlement of the request): nothing to do. Only the reaper's
      -- row of a stream it charged by its mark is finished here.
      IF logged_state <> 'interrupted' THEN
        RETURN NULL;
      END IF;
      v_payment := logged_payment;
    END IF;
    IF s->>'logged_payment' = 'byok' THEN
      -- The account's own provider key served it: nothing to pay, as a settlement charges it.
      v_payment := 'byok';
      charge := 0;
    END IF;
    extra := charge - coalesce(logged_cost, 0);
    IF v_payment = 'byok' THEN
      paid := true;
    ELSIF v_payment = 'subscription' AND logged_state IS NULL THEN
      SELECT subscription_json::jsonb INTO plan FROM accounts WHERE id = v_account;
      -- Every window the hold counted in that still runs must have room; one that rolled over
      -- since counts this request nowhere, as a settlement's release does.
      paid := plan IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM json_each_text(v_ref::json) AS ref
        JOIN subscription_usage AS usage ON usage.account_id = v_account
          AND usage.window_name = ref.key AND usage.window_start = ref.value::bigint
        LEFT JOIN jsonb_array_elements(plan->'windows') AS w(entry) ON w.entry->>'name' = ref.key
        WHERE usage.used + usage.held >= coalesce((w.entry->>'quota')::bigint, 0));
      IF paid THEN
        FOR counted IN SELECT key, value::bigint AS start FROM json_each_text(v_ref::json) LOOP
          UPDATE subscription_usage SET used = used + 1
          WHERE subscription_usage.account_id = v_account
            AND window_name = counted.key AND window_start = counted.start;
        END LOOP;
      END IF;
    ELSIF extra <= 0 THEN
      -- Nothing more to pay: the mark charged this much or more, and what it charged past the
      -- answer comes back.
      IF v_payment = 'balance' THEN
        UPDATE accounts SET balance_micro = balance_micro - extra WHERE id = v_account;
      ELSIF v_payment = 'payg' THEN
        UPDATE accounts SET payg_spent_micro = GREATEST(payg_spent_micro + extra, 0)
        WHERE id = v_account;
      END IF;
      paid := true;
    ELSIF v_payment = 'balance' THEN
      UPDATE accounts SET balance_micro = balance_micro - extra
      WHERE id = v_account AND balance_micro - held_micro >= extra;
      paid := FOUND;
    ELSIF v_payment = 'payg' THEN
      -- A PAYG window that has run out starts over, as a hold starts it.
      UPDATE accounts SET
        payg_window_start = gateway_window_start(payg_window_start, payg_window_seconds, now_ms),
        payg_spent_micro = 0
      WHERE id = v_account AND payg_enabled <> 0
        AND now_ms >= payg_window_start + payg_window_seconds * 1000::bigint;
      UPDATE accounts SET payg_spent_micro = payg_spent_micro + extra
      WHERE id = v_account AND payg_enabled <> 0
        AND payg_spent_micro + payg_held_micro + extra <= payg_limit_micro;
      paid := FOUND;
    ELSE
      paid := false;
    END IF;
    IF logged_state IS NOT NULL THEN
      IF NOT paid THEN
        RETURN -1;
      END IF;
      UPDATE request_log SET state = 'settled', cost_micro = charge,
        input_tokens = (s->>'input_tokens')::bigint, output_tokens = (s->>'output_tokens')::bigint,
        status = (s->>'status')::integer, error_code = s->>'error_code',
        provider_id = s->>'provider_id', finished_at = now_ms, served_model = s->>'served_model'
      WHERE account_id = v_account AND created_at = created AND id = s->>'id';
      RETURN charge;
    END IF;
    INSERT INTO request_log (id, account_id, key_id, endpoint, model, state, payment, payment_ref,
      reserved_micro, cost_micro, input_tokens, output_tokens, status, error_code, provider_id,
      stream, created_at, finished_at, tools_omitted, served_model)
    VALUES (s->>'id', v_account, s->>'key_id', s->>'endpoint', s->>'model',
      CASE WHEN paid THEN 'settled' ELSE 'failed' END, v_payment, v_ref,
      v_held, CASE WHEN paid THEN charge ELSE 0 END,
      CASE WHEN paid THEN (s->>'input_tokens')::bigint ELSE 0 END,
      CASE WHEN paid THEN (s->>'output_tokens')::bigint ELSE 0 END,
      CASE WHEN paid THEN (s->>'status')::integer ELSE 503 END,
      CASE WHEN paid THEN s->>'error_code' ELSE 'storage_unavailable' END,
      s->>'provider_id', (s->>'stream')::integer, created, now_ms, s->>'tools_omitted',
      s->>'served_model');
    RETURN CASE WHEN paid THEN charge ELSE -1 END;
  END $$;
  `,
  `
  -- Settles each of p_settlements: a request admitted from a lease (leased) as
  -- gateway_settle_leased does, one that held nothing (its own provider key, or nothing to pay) by
  -- writing its request_log row, any other as gateway_settle does. Returns each one's charge by
  -- its position in the batch (null: its hold or lease was already gone). Each one's
  -- logged_payment is gateway_settle's p_logged_payment. Settlements are taken by account, and
  -- within an account its subscription windows' and free day's last, so the rows are locked in
  -- the order above. A delivered free answer's tokens (free_model, free_window_start,
  -- free_tokens) count in its model's budget in the same transaction, once it settled here. A
  -- delivered paid answer whose hold or lease the reaper released (lease_gone: its gateway knows
  -- the lease it was admitted from was reaped) is settled by gateway_settle_late: its charge, or
  -- -1 when the account can no longer pay.
  CREATE OR REPLACE FUNCTION gateway_settle_all(p_settlements jsonb)
  RETURNS TABLE ("position" integer, charge bigint) LANGUAGE plpgsql AS $$
  DECLARE
    s record;
    counted jsonb := '[]';
    f record;
  BEGIN
    FOR s IN
      SELECT * FROM jsonb_to_recordset(p_settlements) AS settlement(
        "position" integer, id text, account_id text, payment text, payment_ref text, created_at bigint,
        delivered boolean, cost bigint, key_id text, endpoint text, model text,
        input_tokens bigint, output_tokens bigint, status integer, error_code text,
        provider_id text, stream integer, now bigint, tools_omitted text, logged_payment text,
        leased boolean, stopped boolean, instance_id text, reserved bigint,
        free_model text, free_window_start bigint, free_tokens bigint, served_model text,
        lease_gone boolean)
      ORDER BY settlement.account_id,
        CASE settlement.payment WHEN 'subscription' THEN 1 WHEN 'free' THEN 2 ELSE 0 END,
        settlement.id
    LOOP
      "position" := s."position";
      IF coalesce(s.lease_gone, false) THEN
        -- Its gateway lost the lease it was admitted from (taken as dead): a lease it holds now
        -- paid nothing for it.
        DELETE FROM deliveries WHERE id = s.id;
        charge := NULL;
      ELSIF coalesce(s.leased, false) THEN
        charge := gateway_settle_leased(s.id, s.account_id, s.instance_id, s.reserved, s.stopped,
          s.delivered, s.cost, s.key_id, s.endpoint, s.model, s.input_tokens, s.output_tokens,
          s.status, s.error_code, s.provider_id, s.stream, s.created_at, s.now, s.tools_omitted,
          s.logged_payment, s.served_model);
      ELSIF s.payment IN ('byok', 'none') THEN
        DELETE FROM deliveries WHERE id = s.id;
        INSERT INTO request_log (id, account_id, key_id, endpoint, model, state, payment,
          payment_ref, reserved_micro, cost_micro, input_tokens, output_tokens, status, error_code,
          provider_id, stream, created_at, finished_at, tools_omitted, served_model)
        VALUES (s.id, s.account_id, s.key_id, s.endpoint, s.model,
          CASE WHEN s.delivered THEN 'settled' ELSE 'failed' END,
          coalesce(s.logged_payment, s.payment), s.payment_ref, 0, 0,
          s.input_tokens, s.output_tokens, s.status, s.error_code, s.provider_id, s.stream,
          s.created_at, s.now, s.tools_omitted, s.served_model);
        charge := 0;
      ELSE
        charge := gateway_settle(s.id, s.delivered, s.cost, s.key_id, s.endpoint, s.model,
          s.input_tokens, s.output_tokens, s.status, s.error_code, s.provider_id, s.stream, s.now,
          s.tools_omitted, s.logged_payment, s.served_model);
        -- A free answer whose hold the reaper released (its gateway was taken as dead while the
        -- provider worked) was served all the same: unrecorded, its units would go back to the
        -- budget and the free day, and the next requests be served past them. It is recorded
        -- once (a stream the reaper settled by its mark has its row), charged nothing.
        IF charge IS NULL AND s.delivered AND s.payment = 'free' THEN
          PERFORM 1 FROM accounts WHERE id = s.account_id FOR NO KEY UPDATE;
          IF NOT EXISTS (SELECT 1 FROM request_log WHERE account_id = s.account_id
              AND created_at = s.created_at AND id = s.id) THEN
            INSERT INTO request_log (id, account_id, key_id, endpoint, model, state, payment,
              payment_ref, reserved_micro, cost_micro, input_tokens, output_tokens, status,
              error_code, provider_id, stream, created_at, finished_at, tools_omitted, served_model)
            VALUES (s.id, s.account_id, s.key_id, s.endpoint, s.model, 'settled',
              coalesce(s.logged_payment, s.payment), s.payment_ref, 0, 0, s.input_tokens,
              s.output_tokens, s.status, s.error_code, s.provider_id, s.stream, s.created_at, s.now,
              s.tools_omitted, s.served_model);
            charge := 0;
            IF s.logged_payment IS DISTINCT FROM 'byok' THEN
              UPDATE free_usage SET used = used + 1
              WHERE account_id = s.account_id AND day = s.payment_ref;
            END IF;
          END IF;
        END IF;
      END IF;
      IF charge IS NULL AND s.delivered AND s.payment IN ('balance', 'payg', 'subscription') THEN
        PERFORM 1 FROM accounts WHERE id = s.account_id FOR NO KEY UPDATE;
        charge := gateway_settle_late(to_jsonb(s));
      END IF;
      IF charge IS NOT NULL AND s.free_tokens IS NOT NULL THEN
        counted := counted || jsonb_build_object('model', s.free_model,
          'window_start', s.free_window_start, 'tokens', s.free_tokens);
      END IF;
      RETURN NEXT;
    END LOOP;
    -- The budgets after every account, each model once and in name order: two batches lock
    -- their rows in the same order.
    FOR f IN
      SELECT c.model, c.window_start, sum(c.tokens)::bigint AS tokens
      FROM jsonb_to_recordset(counted) AS c(model text, window_start bigint, tokens bigint)
      GROUP BY c.model, c.window_start ORDER BY c.model, c.window_start
    LOOP
      PERFORM gateway_count_free_tokens(f.model, f.window_start, f.tokens);
    END LOOP;
  END $$;
  `,
  `
  -- Leases more to a gateway whose lease of the account is in use and not recalled, on the terms
  -- of a hold's lease (gateway_hold_all): money while the account's available money stays at
  -- least four times the addition, per-minute slots of the window that ends at p_window_end while
  -- its count stays at least four additions below the limit. Each part is granted on its own;
  -- what was granted is returned. Rows are locked in the order holds lock them: the account, the
  -- count, then the lease. A lease that stopped meanwhile (given back, reaped, recalled) gets
  -- nothing, and what was taken for it goes back in the same transaction.
  CREATE OR REPLACE FUNCTION gateway_lease_top_up(p_instance text, p_account text, p_want_micro bigint,
    p_limit_key text, p_window_end bigint, p_limit_count integer, p_want_count integer)
  RETURNS TABLE (lease_micro bigint, lease_count integer) LANGUAGE plpgsql AS $$
  BEGIN
    lease_micro := 0;
    lease_count := 0;
    PERFORM 1 FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    IF p_want_count > 0 THEN
      UPDATE limit_counts SET count = count + p_want_count
      WHERE key = p_limit_key AND window_end = p_window_end
        AND count + 5 * p_want_count <= p_limit_count;
      IF FOUND THEN
        lease_count := p_want_count;
      END IF;
    END IF;
    IF p_want_micro > 0 THEN
      UPDATE accounts SET held_micro = held_micro + p_want_micro,
        leased_micro = leased_micro + p_want_micro
      WHERE id = p_account AND payg_enabled = 0
        AND balance_micro - held_micro - p_want_micro >= 4 * p_want_micro;
      IF FOUND THEN
        lease_micro := p_want_micro;
      END IF;
    END IF;
    IF lease_micro = 0 AND lease_count = 0 THEN
      RETURN NEXT;
      RETURN;
    END IF;
    UPDATE leases SET money_micro = money_micro + lease_micro,
      count_key = CASE WHEN lease_count > 0 THEN p_limit_key ELSE count_key END
    WHERE instance_id = p_instance AND account_id = p_account AND active AND NOT recall;
    IF NOT FOUND THEN
      IF lease_micro > 0 THEN
        UPDATE accounts SET held_micro = held_micro - lease_micro,
          leased_micro = leased_micro - lease_micro
        WHERE id = p_account;
      END IF;
      IF lease_count > 0 THEN
        UPDATE limit_counts SET count = count - lease_count
        WHERE key = p_limit_key AND window_end = p_window_end;
      END IF;
      lease_micro := 0;
      lease_count := 0;
    END IF;
    RETURN NEXT;
  END $$;
  `,
  `
  -- A stream whose gateway died before it settled: settled as its last delivery mark says (what
  -- it had delivered, at least), from its hold, its gateway's lease, or nothing held (its own
  -- provider key), and logged as interrupted; a free model's stream also counts its tokens in the
  -- model's budget, as gateway_settle_all counts a settled one's. False when it was settled
  -- already.
  CREATE OR REPLACE FUNCTION gateway_settle_interrupted(p_id text) RETURNS boolean
  LANGUAGE plpgsql AS $$
  DECLARE
    d deliveries%ROWTYPE;
    admitted bigint;
  BEGIN
    PERFORM 1 FROM accounts WHERE id = (SELECT account_id FROM deliveries WHERE id = p_id)
    FOR NO KEY UPDATE;
    DELETE FROM deliveries WHERE id = p_id RETURNING * INTO d;
    IF NOT FOUND THEN
      RETURN false;
    END IF;
    -- The log has no index on ids: its row is found in the account's range at its admission time.
    admitted := (d.settlement->>'created_at')::bigint;
    IF EXISTS (SELECT 1 FROM request_log WHERE account_id = d.account_id
        AND created_at = admitted AND id = p_id) THEN
      RETURN false;
    END IF;
    PERFORM * FROM gateway_settle_all(jsonb_build_array(d.settlement));
    UPDATE request_log SET state = 'interrupted'
    WHERE account_id = d.account_id AND created_at = admitted AND id = p_id AND state = 'settled';
    IF NOT FOUND THEN
      RETURN false;
    END IF;
    RETURN true;
  END $$;
  `,
];
