import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll } from "vitest";
import {
  type CassetteOptions,
  type GatewayConfig,
  type RunningGateway,
  startGateway,
} from "../../src/index.js";
import { killRunningClis } from "./cli.js";
import { type FakeUpstream, fakeUpstream } from "./fake-upstream.js";

/** The app of a user's suite, as its gateway config names it. */
export interface App {
  /** The app's gateway key. */
  key: string;
  /** The key of its provider `up`. */
  providerKey: string;
  /** The provider's `timeout_ms`, where the suite wants one. */
  timeoutMs?: number;
  /** The account's balance in IDR (100,000 unless given). */
  balanceIdr?: number;
}

/**
 * The gateway config of a user's app: its provider `up` (openai wire) at `baseUrl` with the model
 * `app-chat` (upstream `gpt-up`), and the account `app` holding `app.key`.
 */
export function appConfig(app: App, baseUrl: string): GatewayConfig {
  return {
    providers: [
      {
        id: "up",
        wire: "openai",
        base_url: baseUrl,
        api_keys: [app.providerKey],
        ...(app.timeoutMs === undefined ? {} : { timeout_ms: app.timeoutMs }),
      },
    ],
    models: [
      {
        name: "app-chat",
        provider: "up",
        upstream_model: "gpt-up",
        price_input_per_mtok: 1_000,
        price_output_per_mtok: 2_000,
      },
    ],
    accounts: [
      { id: "app", balance_idr: app.balanceIdr ?? 100_000, keys: [{ id: "ci", value: app.key }] },
    ],
  };
}

/** What a cassette suite's file has once started. */
export interface CassetteFolder {
  /** A fresh directory for the file's cassette folders and config files. */
  root: string;
  /** The app's provider; back to its plain answer after each test. */
  upstream: FakeUpstream;
}

/** The app's gateways, for its tests. */
export interface CassetteApp {
  /** The app's config with its provider at `baseUrl`, as `gateway serve --config` reads it too. */
  config(baseUrl: string): GatewayConfig;
  /** A gateway of the app with `cassettes`, its provider at `baseUrl` (the fake's by default). */
  start(cassettes: CassetteOptions, baseUrl?: string): Promise<RunningGateway>;
  /** Closes the gateways this test started, before the test ends. */
  closeStarted(): Promise<void>;
  /** The openai SDK on `gw`, with the app's key. */
  client(gw: { url: string }): OpenAI;
}

/**
 * For a file of cassette tests, as a user's suite records its provider's answers: gateways of the
 * app (`appConfig`) and its provider, a fake. `ready` gets the folder and the fake once started.
 * Every gateway a test started and every CLI it ran is gone after it, so a folder's lock never
 * outlives its test.
 */
export function useCassetteSuite(app: App, ready: (started: CassetteFolder) => void): CassetteApp {
  const gateways: RunningGateway[] = [];
  let folder: CassetteFolder | undefined;
  const config = (baseUrl: string) => appConfig(app, baseUrl);
  const closeStarted = async () => {
    await Promise.all(gateways.splice(0).map((gw) => gw.close()));
  };
  beforeAll(async () => {
    folder = {
      root: mkdtempSync(join(tmpdir(), "gateway-cassettes-")),
      upstream: await fakeUpstream("openai"),
    };
    ready(folder);
  });
  afterEach(async () => {
    killRunningClis();
    await closeStarted();
    folder?.upstream.reset();
  });
  afterAll(async () => {
    await folder?.upstream.close();
    if (folder) rmSync(folder.root, { recursive: true, force: true });
  });
  return {
    config,
    async start(cassettes, baseUrl) {
      if (!folder) throw new Error("useCassetteSuite: a gateway starts in a test, after beforeAll");
      const gw = await startGateway({
        config: config(baseUrl ?? folder.upstream.baseUrl),
        cassettes,
      });
      gateways.push(gw);
      return gw;
    },
    closeStarted,
    client: (gw) => new OpenAI({ apiKey: app.key, baseURL: `${gw.url}/v1`, maxRetries: 0 }),
  };
}
