import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { maxJsonDepth } from "../src/server/wire/json-depth.js";
import {
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import { baseConfigWith, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * Bodies nested past the bound are refused with a 400 in the route's style before admission, on
 * every text route, streamed or not, toward every wire; a body at the bound is served. Before the
 * bound existed, 1,000 to 3,000 levels overflowed the stack (500).
 */

let upstream: FakeUpstream;
let gw: TestGateway;

beforeAll(async () => {
  upstream = await fakeUpstream("openai", (req) =>
    req.body.stream === true ? { kind: "sse", steps: openaiStreamSteps(["ok"]) } : openaiJson("ok"),
  );
  gw = await testGateway({
    config: baseConfigWith({
      providers: [
        { id: "oa", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-oa-nesting"] },
      ],
      models: [
        {
          name: "gpt-x",
          provider: "oa",
          price_input_per_mtok: 10_000,
          price_output_per_mtok: 20_000,
        },
      ],
    }),
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const marker = "__DEEP__";

/** A request of `route`'s style whose tool schema holds the marker where the nesting goes. */
function template(route: string, model: string, stream: boolean): object {
  const schema = { type: "object", properties: { x: marker } };
  if (route === "/v1/messages")
    return {
      model,
      max_tokens: 50,
      stream,
      messages: [{ role: "user", content: "hello" }],
      tools: [{ name: "f", input_schema: schema }],
    };
  if (route === "/v1/responses")
    return {
      model,
      stream,
      input: "hello",
      tools: [{ type: "function", name: "f", parameters: schema }],
    };
  return {
    model,
    stream,
    messages: [{ role: "user", content: "hello" }],
    tools: [{ type: "function", function: { name: "f", parameters: schema } }],
  };
}

/** Depth of the marker's position, counted on the parsed template (not with the gateway's scan). */
function depthAt(value: unknown, depth = 0): number | undefined {
  if (value === marker) return depth;
  if (value && typeof value === "object") {
    for (const child of Object.values(value)) {
      const found = depthAt(child, depth + 1);
      if (found !== undefined) return found;
    }
  }
  return undefined;
}

/** The request as text, its objects and arrays nested exactly `total` deep. */
function nestedBody(route: string, model: string, stream: boolean, total: number): string {
  const t = template(route, model, stream);
  const levels = total - (depthAt(t) ?? 0);
  const deep = `${'{"y":'.repeat(levels - 1)}{}${"}".repeat(levels - 1)}`;
  return JSON.stringify(t).replace(`"${marker}"`, deep);
}

const routes = ["/v1/chat/completions", "/v1/messages", "/v1/responses"];
const cases = routes.flatMap((route) =>
  ["mock-gpt", "gpt-x"].flatMap((model) =>
    [false, true].map((stream) => ({ route, model, stream })),
  ),
);

describe("JSON nesting bound", () => {
  it.each(cases)(
    "$route to $model, stream $stream: at the limit served, past it 400",
    async ({ route, model, stream }) => {
      const before = gw.services.ledger.heldMicro("acct");
      const sentBefore = upstream.requests.length;
      const past = await post(gw, route, nestedBody(route, model, stream, maxJsonDepth + 1));
      expect(past.status).toBe(400);
      const body = (await past.json()) as {
        type?: string;
        error: { type: string; message: string };
      };
      if (route === "/v1/messages") {
        expect(body.type).toBe("error");
        expect(body.error.type).toBe("invalid_request_error");
      } else expect(body.error.type).toBe("bad_request");
      expect(body.error.message).toContain(`${maxJsonDepth} levels`);
      expect(upstream.requests.length).toBe(sentBefore);
      expect(gw.services.ledger.heldMicro("acct")).toBe(before);

      const at = await post(gw, route, nestedBody(route, model, stream, maxJsonDepth));
      expect(at.status).toBe(200);
      await at.text();
      if (model === "gpt-x") expect(upstream.requests.length).toBe(sentBefore + 1);
    },
  );

  it("thousands of levels are a 400 too, and the account's money is untouched", async () => {
    const quota = async () =>
      (await (
        await fetch(`${gw.url}/v1/account/quota`, { headers: { authorization: `Bearer ${KEY}` } })
      ).json()) as { balance_idr: number };
    const before = (await quota()).balance_idr;
    for (const route of routes) {
      for (const stream of [false, true]) {
        const res = await post(gw, route, nestedBody(route, "gpt-x", stream, 5_000));
        expect(res.status).toBe(400);
      }
    }
    expect((await quota()).balance_idr).toBe(before);
    expect(gw.services.ledger.heldMicro("acct")).toBe(0);
  });

  it("the device-flow endpoints answer an RFC 8628 invalid_request", async () => {
    const deep = `{"client_name":"x","z":${"[".repeat(500)}${"]".repeat(500)}}`;
    const res = await fetch(`${gw.url}/api/auth/device/code`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: deep,
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: string; error_description: string };
    expect(body.error).toBe("invalid_request");
    expect(body.error_description).toContain(`${maxJsonDepth} levels`);
  });
});
