import pg from "pg";
import {
  clearInterval,
  clearTimeout,
  performanceNow,
  setInterval,
  setTimeout,
} from "../../host-timers.js";
import type { KeyPoolSync } from "../types.js";

/** The channel `gateway_cool_key` notifies on (see the migration step provider-key-cooldowns). */
const channel = "gateway_key_cooldowns";

const defaults = {
  instancesRefreshMs: 5_000,
  reconnectMinMs: 100,
  reconnectMaxMs: 5_000,
  connectTimeoutMs: 5_000,
  applicationName: "model-gateway",
};

export interface PostgresKeyPoolSyncOptions {
  /** The database's URL: the listener holds a connection of its own, outside the pool. */
  url: string;
  /** How often the count of live gateways, which splits max_concurrency, is read again. */
  instancesRefreshMs?: number;
  /** This gateway's id in `instances`: its place among the live ones (none: the first). */
  instanceId?: string;
  /** The first wait before reconnecting a lost listener; it doubles up to `reconnectMaxMs`. */
  reconnectMinMs?: number;
  reconnectMaxMs?: number;
  connectTimeoutMs?: number;
  applicationName?: string;
}

type CooledListener = (providerId: string, fingerprint: string, coolMs: number) => void;

/**
 * Provider key cooldowns shared by the gateways on one database. A 429 is written to
 * `provider_key_cooldowns` and notified in one statement (`gateway_cool_key`); each gateway
 * LISTENs on a connection of its own and, whenever that connection is made again after a loss,
 * reads every cooldown still running, so none published meanwhile is missed. The number of live
 * gateways (the `instances` leases, see money.ts) is read on a timer for the max_concurrency share.
 */
export class PostgresKeyPoolSync implements KeyPoolSync {
  private readonly listeners: CooledListener[] = [];
  /**
   * Cooldowns heard and still running, by provider and fingerprint, with when they end on this
   * process's monotonic clock: told to a listener that comes after they were heard.
   */
  private readonly running = new Map<
    string,
    { providerId: string; fingerprint: string; until: number }
  >();
  private readonly options: Required<Omit<PostgresKeyPoolSyncOptions, "instanceId">> &
    Pick<PostgresKeyPoolSyncOptions, "instanceId">;
  private live = 1;
  private before = 0;
  private client: pg.Client | undefined;
  private pid: number | undefined;
  private backoffMs: number;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private refreshing = false;
  private closed = false;

  constructor(
    private readonly pool: pg.Pool,
    options: PostgresKeyPoolSyncOptions,
  ) {
    this.options = { ...defaults, ...options };
    this.backoffMs = this.options.reconnectMinMs;
  }

  /** Listens, reads the cooldowns running and the live gateways, then keeps both current. */
  async start(): Promise<void> {
    try {
      await this.connect();
      await this.refreshInstances();
    } catch (err) {
      await this.close();
      throw err;
    }
    this.refreshTimer = setInterval(
      () => void this.refreshQuietly(),
      this.options.instancesRefreshMs,
    );
    this.refreshTimer.unref();
  }

  cooled(providerId: string, fingerprint: string, coolMs: number): void {
    this.pool
      .query({
        name: "gateway_cool_key",
        text: "SELECT gateway_cool_key($1, $2, $3)",
        values: [providerId, fingerprint, Math.max(0, Math.ceil(coolMs))],
      })
      .catch((err: Error) => {
        // This gateway cooled the key already; only the others will not hear of it.
        console.error(`gateway: sharing a provider key's cooldown failed: ${err.message}`);
      });
  }

  onCooled(listener: CooledListener): void {
    this.listeners.push(listener);
    const now = performanceNow();
    for (const cooldown of this.running.values()) {
      if (cooldown.until > now) {
        listener(cooldown.providerId, cooldown.fingerprint, cooldown.until - now);
      }
    }
  }

  liveInstances(): number {
    return this.live;
  }

  liveBefore(): number {
    return this.before;
  }

  /** The listener's server process while it is connected (an operator may look it up). */
  get listenerPid(): number | undefined {
    return this.pid;
  }

  async refreshInstances(): Promise<number> {
    const result = await this.pool.query<{ live: number; before: number }>({
      name: "gateway_live_instances",
      text: `SELECT count(*)::integer AS live, count(*) FILTER (WHERE id < $1)::integer AS before
        FROM instances WHERE lease_until > gateway_now_ms()`,
      values: [this.options.instanceId ?? ""],
    });
    this.live = Math.max(1, result.rows[0]?.live ?? 1);
    this.before = Math.min(this.live - 1, result.rows[0]?.before ?? 0);
    return this.live;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    if (this.refreshTimer) clearInterval(this.refreshTimer);
    this.reconnectTimer = undefined;
    this.refreshTimer = undefined;
    const client = this.client;
    this.client = undefined;
    this.pid = undefined;
    await client?.end().catch(() => {});
  }

  private async refreshQuietly(): Promise<void> {
    // A round trip slower than the interval must not start a second one beside it.
    if (this.refreshing) return;
    this.refreshing = true;
    try {
      await this.refreshInstances();
    } catch (err) {
      console.error(`gateway: counting the live gateways failed: ${(err as Error).message}`);
    } finally {
      this.refreshing = false;
    }
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.options.url,
      application_name: this.options.applicationName,
      connectionTimeoutMillis: this.options.connectTimeoutMs,
      keepAlive: true,
    });
    this.client = client;
    client.on("error", (err) => this.lost(client, err));
    client.on("end", () => this.lost(client));
    client.on("notification", (message) => this.heard(message.payload));
    try {
      await client.connect();
      // Listening before reading: a cooldown written in between is heard, if not also read.
      await client.query(`LISTEN ${channel}`);
      const backend = await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
      const running = await client.query<{ provider_id: string; fingerprint: string; ms: number }>(
        `SELECT provider_id, fingerprint, (cooling_until - gateway_now_ms())::float8 AS ms
         FROM provider_key_cooldowns WHERE cooling_until > gateway_now_ms()`,
      );
      if (client !== this.client) return;
      this.pid = backend.rows[0].pid;
      for (const row of running.rows) this.tell(row.provider_id, row.fingerprint, row.ms);
      this.backoffMs = this.options.reconnectMinMs;
    } catch (err) {
      this.lost(client, err as Error);
      throw err;
    }
  }

  /** The listener's connection broke (or never came up): drop it and try again, waiting longer each time. */
  private lost(client: pg.Client, err?: Error): void {
    if (client !== this.client) return;
    this.client = undefined;
    this.pid = undefined;
    // A broken client may still report errors while it closes; they say nothing new.
    client.on("error", () => {});
    client.end().catch(() => {});
    if (this.closed) return;
    const delay = this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, this.options.reconnectMaxMs);
    console.error(
      `gateway: the provider key cooldown listener lost its connection${err ? ` (${err.message})` : ""}; reconnecting in ${delay} ms`,
    );
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (this.closed) return;
      // A failure is reported and retried by `lost`.
      this.connect().catch(() => {});
    }, delay);
    this.reconnectTimer.unref();
  }

  private heard(payload: string | undefined): void {
    if (!payload) return;
    let message: { provider?: unknown; fingerprint?: unknown; ms?: unknown };
    try {
      message = JSON.parse(payload) as typeof message;
    } catch {
      return;
    }
    const { provider, fingerprint, ms } = message;
    if (typeof provider !== "string" || typeof fingerprint !== "string" || typeof ms !== "number") {
      return;
    }
    this.tell(provider, fingerprint, ms);
  }

  private tell(providerId: string, fingerprint: string, coolMs: number): void {
    const now = performanceNow();
    for (const [id, cooldown] of this.running) if (cooldown.until <= now) this.running.delete(id);
    const id = `${providerId}\u0000${fingerprint}`;
    const until = now + coolMs;
    if (until > (this.running.get(id)?.until ?? 0)) {
      this.running.set(id, { providerId, fingerprint, until });
    }
    for (const listener of this.listeners) listener(providerId, fingerprint, coolMs);
  }
}
