import OpenAI from "openai";
import { afterAll, beforeAll } from "vitest";
import type { GatewayOptions } from "../../src/server/gateway.js";
import {
  type BackendName,
  baseConfigWith,
  type ConfigAdditions,
  gatewayOn,
  KEY,
  type TestGateway,
} from "./gateway.js";

export type { ConfigAdditions };

/** A gateway with job models, and the openai SDK pointed at it. */
export interface JobsGateway {
  gw: TestGateway;
  openai: OpenAI;
}

/**
 * For a file's job tests on `backend`: `baseConfig` with `more`'s providers, models, routes and
 * accounts after its own (a job's provider is a mock whose `job_seconds` is the job's time on the
 * gateway's clock), started with `options`; the SDK holds `KEY`. `ready` gets them once started.
 */
export function useJobsGateway(
  backend: BackendName,
  more: ConfigAdditions,
  options: Omit<GatewayOptions, "config">,
  ready: (started: JobsGateway) => void,
): void {
  let gw: TestGateway | undefined;
  beforeAll(async () => {
    gw = await gatewayOn(backend, { ...options, config: baseConfigWith(more) });
    ready({
      gw,
      openai: new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 }),
    });
  });
  afterAll(async () => {
    await gw?.close();
  });
}
