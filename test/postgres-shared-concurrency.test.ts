import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorOf } from "./support/api.js";
import { deferred, type FakeUpstream, fakeUpstream, openaiJson } from "./support/fake-upstream.js";
import { baseConfigWith, chat, post } from "./support/gateway.js";
import {
  eventually,
  type GatewaysOnPostgres,
  gatewaysOnPostgres,
} from "./support/gateways-on-postgres.js";

/**
 * A provider's max_concurrency holds across the gateways on one database: with a limit of 1 and
 * two gateways, the provider never has two of their requests at once; the gateway whose share is
 * none refuses as at capacity (503 all_providers_failed, with Retry-After).
 */

let upstream: FakeUpstream;
let cluster: GatewaysOnPostgres;
let inFlight = 0;
let most = 0;
let arrived = 0;
let gate = deferred();

beforeAll(async () => {
  upstream = await fakeUpstream("openai", async () => {
    arrived++;
    inFlight++;
    most = Math.max(most, inFlight);
    await gate.promise;
    inFlight--;
    return openaiJson("held answer");
  });
  cluster = await gatewaysOnPostgres(
    2,
    baseConfigWith({
      providers: [
        {
          id: "one-at-a-time",
          wire: "openai",
          base_url: upstream.baseUrl,
          api_keys: ["sk-only"],
          max_concurrency: 1,
          timeout_ms: 20_000,
        },
      ],
      models: [{ name: "held", provider: "one-at-a-time", price_input_per_mtok: 1_000 }],
    }),
  );
}, 60_000);

afterAll(async () => {
  gate.resolve();
  await cluster?.stop();
  await upstream?.close();
});

/**
 * One request to each gateway at once, the upstream holding what reaches it until both have
 * either reached it or been answered; then it answers. Each request's status, and the most the
 * upstream held at once.
 */
async function round(): Promise<{ answers: Response[]; most: number }> {
  gate = deferred();
  arrived = 0;
  most = 0;
  let refused = 0;
  const sent = cluster.gateways.map((gateway) =>
    post(gateway, "/v1/chat/completions", chat("hi", "held")).then((answer) => {
      if (answer.status !== 200) refused++;
      return answer;
    }),
  );
  await eventually(
    async () => arrived + refused,
    (seen) => seen >= 2,
    15_000,
    "requests reaching the upstream or answered",
  );
  gate.resolve();
  return { answers: await Promise.all(sent), most };
}

describe("max_concurrency across gateways on one Postgres", () => {
  it("with a limit of 1, two gateways never have two requests at the provider at once", async () => {
    // Each gateway learns the other is live when it next counts the leases: until then a round
    // may have both at the provider.
    await eventually(
      async () => {
        const { answers } = await round();
        return answers.map((answer) => answer.status).sort();
      },
      (statuses) => statuses.join() === "200,503",
      30_000,
      `the two gateways' answers\n${cluster.stderr()}`,
    );
    for (let index = 0; index < 3; index++) {
      const { answers, most: held } = await round();
      expect(held).toBe(1);
      const served = answers.filter((answer) => answer.status === 200);
      const refused = answers.filter((answer) => answer.status !== 200);
      expect(served).toHaveLength(1);
      expect(refused).toHaveLength(1);
      expect(await errorOf(refused[0])).toMatchObject({
        status: 503,
        code: "all_providers_failed",
        retryAfter: "1",
      });
      const body = (await served[0].json()) as { choices: { message: { content: string } }[] };
      expect(body.choices[0].message.content).toBe("held answer");
    }
  }, 90_000);
});
