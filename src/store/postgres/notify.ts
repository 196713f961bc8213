import pg from "pg";
import { clearInterval, clearTimeout, setInterval, setTimeout } from "../../host-timers.js";
import { randomToken } from "../secrets.js";
import type { Queryable } from "./transaction.js";

/** The channel every gateway on the database listens on for changes to what it keeps in memory. */
const changesChannel = "gateway_changes";
/**
 * The listeners' own channel: each says it is there when it starts listening, and confirms each
 * announced write once it has read it, so the writer knows every gateway has.
 */
const confirmationsChannel = "gateway_change_confirmations";

/**
 * What a write changed, as its notification names it: an account's row, a key's row, an
 * account's BYOK credentials (`id` is the account's), the catalog, or anything at all.
 */
export type Change =
  | { t: "account"; id: string }
  | { t: "key"; id: string }
  | { t: "byok"; id: string }
  | { t: "catalog" }
  | { t: "all" };

/** A change as sent: `n` names the write whose writer waits for its own copy to come back. */
export type ChangeMessage = Change & { n?: string };

function changePayload(change: Change, nonce?: string): string {
  return JSON.stringify(nonce === undefined ? change : { ...change, n: nonce });
}

/**
 * Announces `change` on `db`, the connection of the transaction that makes it: Postgres delivers
 * it to every listener when that transaction commits, and never if it rolls back.
 */
export async function notifyChange(db: Queryable, change: Change, nonce?: string): Promise<void> {
  await db.query({
    name: "gateway_notify_change",
    text: "SELECT pg_notify($1, $2)",
    values: [changesChannel, changePayload(change, nonce)],
  });
}

/** A payload this version does not understand asks for everything to be read again. */
function parseChange(payload: string): ChangeMessage {
  try {
    const message = JSON.parse(payload) as Record<string, unknown>;
    const nonce = typeof message.n === "string" ? { n: message.n } : {};
    if (
      (message.t === "account" || message.t === "key" || message.t === "byok") &&
      typeof message.id === "string"
    ) {
      return { t: message.t, id: message.id, ...nonce };
    }
    if (message.t === "catalog" || message.t === "all") return { t: message.t, ...nonce };
  } catch {
    // Not JSON: read everything, below.
  }
  return { t: "all" };
}

function entityOf(change: Change): string {
  return "id" in change ? `${change.t}:${change.id}` : change.t;
}

/** A message between listeners: here I am (`hello`, answered by `here`), I read `n`, I leave. */
interface Confirmation {
  k: "hello" | "here" | "read" | "bye";
  /** The listener that sends it. */
  o: string;
  n?: string;
}

function parseConfirmation(payload: string): Confirmation | null {
  try {
    const message = JSON.parse(payload) as Record<string, unknown>;
    if (
      typeof message.o === "string" &&
      (message.k === "hello" || message.k === "here" || message.k === "read" || message.k === "bye")
    ) {
      return {
        k: message.k,
        o: message.o,
        ...(typeof message.n === "string" && { n: message.n }),
      };
    }
  } catch {
    // Not one of ours: ignored.
  }
  return null;
}

/** The listener that wrote a change: a nonce is its listener's tag, a dot, then random text. */
function originOf(nonce: string): string | undefined {
  const dot = nonce.indexOf(".");
  return dot > 0 ? nonce.slice(0, dot) : undefined;
}

/** What a repository that keeps rows in memory needs of the change feed. */
export interface ChangeFeed {
  /**
   * Runs `write`, which announces `change` with `nonce` inside its transaction, and resolves
   * once this process's own listener and every other gateway's have read the change into memory
   * (bounded: a gateway that does not confirm in time is not waited for again until it is heard
   * from; a change our own listener did not read back is read here).
   * `changed` says from the write's result whether it changed anything (and so announced it).
   */
  publish<T>(
    change: Change,
    write: (nonce: string) => Promise<T>,
    changed?: (result: T) => boolean,
  ): Promise<T>;
  /**
   * False when memory may not hold `change`'s entity as committed: a change to it was announced
   * and not read yet, or notifications may have been missed. The request path reads the database then.
   */
  isCurrent(change: Change): boolean;
}

export interface ChangeListenerOptions {
  /** The listener's own connection: never one of the pool's, which come and go. */
  connection: pg.ClientConfig;
  /** Reads what `change` names into memory; `{ t: "all" }` reads everything. */
  apply(change: Change): Promise<void>;
  /** How often everything is read again, whatever was announced. */
  safetyTtlMs?: number;
  /** How long a write waits for every gateway to confirm it. */
  echoTimeoutMs?: number;
  /** The first wait before reconnecting; it doubles up to `maxReconnectDelayMs`. */
  reconnectDelayMs?: number;
  maxReconnectDelayMs?: number;
}

const defaults = {
  safetyTtlMs: 30_000,
  echoTimeoutMs: 2_000,
  reconnectDelayMs: 100,
  maxReconnectDelayMs: 5_000,
};

/** A write waiting for its announcement to be read everywhere. */
interface Echo {
  /** Set once our own listener read it (true), or can no longer (false). */
  own?: boolean;
  /** The other listeners that confirmed reading it. */
  confirmed: Set<string>;
  wake?: () => void;
}

/**
 * LISTEN on a dedicated connection, and the reads that keep memory current: each notification
 * marks its entity unread at once (the request path then asks the database) and reads it again,
 * one read after another in the order they arrived, then confirms the read to the writer. A lost
 * connection is opened again with backoff, and everything is read once it listens again (a
 * notification may have been missed meanwhile); everything is also read every `safetyTtlMs`.
 *
 * Why writers wait for confirmations and not only for their own copy: Postgres signals every
 * listening session at commit, but each session sends its copy when its process next runs, so
 * on a busy server another gateway's copy can arrive milliseconds after ours.
 */
export class ChangeListener implements ChangeFeed {
  private readonly options: Required<ChangeListenerOptions>;
  /** This listener's name among the gateways' listeners; it starts each nonce of ours. */
  private readonly tag = randomToken(9);
  private client: pg.Client | null = null;
  private stopped = false;
  /** Reads run one at a time, in order, so an older read never lands after a newer one. */
  private queue: Promise<void> = Promise.resolve();
  /** Entities announced and not read yet, with how many announcements are pending. */
  private readonly unread = new Map<string, number>();
  /** Notifications may have been missed (the connection was lost, a read failed) and not yet made good. */
  private missed = false;
  /** Counts lost connections: a read that began before a loss cannot make good what the loss missed. */
  private losses = 0;
  /** Other gateways' listeners that a write waits for. */
  private readonly peers = new Set<string>();
  private readonly echoes = new Map<string, Echo>();
  private reconnectDelay: number;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private safetyTimer: NodeJS.Timeout | undefined;

  constructor(options: ChangeListenerOptions) {
    this.options = { ...defaults, ...options };
    this.reconnectDelay = this.options.reconnectDelayMs;
  }

  /** Listens, then reads everything; throws when either fails (start-up reports it). */
  async start(): Promise<void> {
    await this.connect();
    try {
      await this.enqueue(() => this.readAll());
    } catch (err) {
      await this.stop();
      throw err;
    }
    this.safetyTimer = setInterval(() => void this.readAllLogged(), this.options.safetyTtlMs);
    this.safetyTimer.unref();
  }

  get listening(): boolean {
    return this.client !== null;
  }

  /** The server process of the listening connection (tests end it to cut the connection). */
  get backendPid(): number | undefined {
    return (this.client as { processID?: number } | null)?.processID;
  }

  isCurrent(change: Change): boolean {
    return (
      this.client !== null &&
      !this.missed &&
      !this.unread.has("all") &&
      !this.unread.has(entityOf(change))
    );
  }

  async publish<T>(
    change: Change,
    write: (nonce: string) => Promise<T>,
    changed: (result: T) => boolean = () => true,
  ): Promise<T> {
    const nonce = `${this.tag}.${randomToken(12)}`;
    const echo: Echo = { confirmed: new Set() };
    this.echoes.set(nonce, echo);
    try {
      const result = await write(nonce);
      if (changed(result) && !(await this.readEverywhere(echo))) {
        // Our copy did not come back (no connection, or a slow one): read the change here, so
        // this process at least answers with what it just wrote.
        await this.options.apply(change).catch((err: Error) => this.readFailed(err));
      }
      return result;
    } finally {
      this.echoes.delete(nonce);
    }
  }

  /** Stops listening and every timer; the pool the reads use is its owner's to end. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.retryTimer);
    clearInterval(this.safetyTimer);
    const client = this.client;
    this.client = null;
    this.wakeEchoes();
    if (client) {
      // So that no writer waits for a listener that is gone.
      await this.sendOn(client, { k: "bye", o: this.tag });
      await client.end().catch(() => {});
    }
    await this.queue;
  }

  private async connect(): Promise<void> {
    const client = new pg.Client(this.options.connection);
    client.on("notification", (message) => {
      if (this.stopped || message.payload === undefined) return;
      if (message.channel === changesChannel) this.received(message.payload);
      else this.heard(message.payload);
    });
    client.on("error", (err) => this.lost(client, err));
    client.on("end", () => this.lost(client));
    try {
      await client.connect();
      await client.query(`LISTEN ${changesChannel}`);
      await client.query(`LISTEN ${confirmationsChannel}`);
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    if (this.stopped) {
      await client.end().catch(() => {});
      return;
    }
    this.client = client;
    this.send({ k: "hello", o: this.tag });
  }

  private received(payload: string): void {
    const message = parseChange(payload);
    const entity = entityOf(message);
    // Marked at once, before the read: from now on the request path asks the database.
    this.unread.set(entity, (this.unread.get(entity) ?? 0) + 1);
    void this.enqueue(async () => {
      let read = true;
      try {
        await (message.t === "all" ? this.readAll() : this.options.apply(message));
      } catch (err) {
        read = false;
        this.readFailed(err as Error);
      } finally {
        const left = (this.unread.get(entity) ?? 1) - 1;
        if (left > 0) this.unread.set(entity, left);
        else this.unread.delete(entity);
      }
      const origin = message.n === undefined ? undefined : originOf(message.n);
      if (message.n === undefined || origin === undefined) return;
      if (origin === this.tag) this.settleEcho(message.n, read);
      else {
        this.peers.add(origin);
        // A failed read confirms too: memory is marked behind, so the database answers here.
        this.send({ k: "read", o: this.tag, n: message.n });
      }
    });
  }

  /** A message from another listener; any message says that listener is there. */
  private heard(payload: string): void {
    const message = parseConfirmation(payload);
    if (!message || message.o === this.tag) return;
    if (message.k === "bye") {
      this.peers.delete(message.o);
      for (const echo of this.echoes.values()) echo.wake?.();
      return;
    }
    this.peers.add(message.o);
    if (message.k === "hello") this.send({ k: "here", o: this.tag });
    if (message.k === "read" && message.n !== undefined) {
      const echo = this.echoes.get(message.n);
      if (echo) {
        echo.confirmed.add(message.o);
        echo.wake?.();
      }
    }
  }

  private send(message: Confirmation): void {
    if (this.client) void this.sendOn(this.client, message);
  }

  private async sendOn(client: pg.Client, message: Confirmation): Promise<void> {
    // A failure here is the connection's: its loss is handled where it is reported.
    await client
      .query("SELECT pg_notify($1, $2)", [confirmationsChannel, JSON.stringify(message)])
      .catch(() => {});
  }

  private async readAll(): Promise<void> {
    const listening = this.client !== null;
    const losses = this.losses;
    await this.options.apply({ t: "all" });
    if (listening && losses === this.losses && this.client !== null) this.missed = false;
  }

  private async readAllLogged(): Promise<void> {
    await this.enqueue(() => this.readAll()).catch((err: Error) => this.readFailed(err));
  }

  /** Memory may now be behind: the database answers until everything was read again. */
  private readFailed(err: Error): void {
    this.missed = true;
    if (this.stopped) return;
    console.error(`postgres: reading a change into memory failed: ${err.message}`);
    if (this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (!this.stopped) void this.readAllLogged();
    }, this.reconnectDelay);
    this.retryTimer.unref();
  }

  private enqueue(task: () => Promise<void>): Promise<void> {
    const run = this.queue.then(task);
    this.queue = run.catch(() => {});
    return run;
  }

  private lost(client: pg.Client, err?: Error): void {
    if (client !== this.client) return;
    this.client = null;
    this.losses++;
    this.missed = true;
    this.wakeEchoes();
    client.end().catch(() => {});
    if (this.stopped) return;
    console.error(
      `postgres: the change listener lost its connection (${err?.message ?? "closed"}); reconnecting`,
    );
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.stopped || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => void this.reconnect(), this.reconnectDelay);
    this.reconnectTimer.unref();
  }

  private async reconnect(): Promise<void> {
    this.reconnectTimer = undefined;
    try {
      await this.connect();
    } catch (err) {
      if (this.stopped) return;
      console.error(`postgres: the change listener could not reconnect: ${(err as Error).message}`);
      this.reconnectDelay = Math.min(this.reconnectDelay * 2, this.options.maxReconnectDelayMs);
      this.scheduleReconnect();
      return;
    }
    this.reconnectDelay = this.options.reconnectDelayMs;
    await this.readAllLogged();
  }

  /**
   * Waits until our own listener and every other one known has read the write (bounded), and
   * says whether ours did. Without a connection nothing can come back: no wait at all.
   */
  private async readEverywhere(echo: Echo): Promise<boolean> {
    const expected = [...this.peers];
    const done = () =>
      this.client === null ||
      (echo.own !== undefined &&
        expected.every((peer) => echo.confirmed.has(peer) || !this.peers.has(peer)));
    if (!done()) {
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        echo.wake = () => {
          if (done()) resolve();
        };
        timer = setTimeout(resolve, this.options.echoTimeoutMs);
      });
      clearTimeout(timer);
    }
    if (this.client !== null) {
      for (const peer of expected) {
        if (echo.confirmed.has(peer) || !this.peers.has(peer)) continue;
        // Alive but slow, or gone without a word: writes stop waiting for it until it is heard from.
        this.peers.delete(peer);
        console.error(
          `postgres: gateway listener ${peer} did not confirm a change within ${this.options.echoTimeoutMs} ms; not waiting for it until it is heard from again`,
        );
      }
    }
    return echo.own === true;
  }

  private settleEcho(nonce: string, seen: boolean): void {
    const echo = this.echoes.get(nonce);
    if (!echo || echo.own !== undefined) return;
    echo.own = seen;
    echo.wake?.();
  }

  /** A lost connection may have lost the writers' copies too: none of them waits any longer. */
  private wakeEchoes(): void {
    for (const echo of this.echoes.values()) {
      echo.own ??= false;
      echo.wake?.();
    }
  }
}
