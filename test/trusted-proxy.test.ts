import { afterEach, describe, expect, it } from "vitest";
import { sharedKeyPerIpPerMinute } from "../src/server/limits/shared-key.js";
import { chat, post, SHARED_KEY, type TestGateway, testGateway } from "./support/gateway.js";

/** A gateway behind a load balancer: the tests' own connections play the balancer. */
let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

const sharedFrom = (client: string) => ({
  authorization: `Bearer ${SHARED_KEY}`,
  "x-forwarded-for": client,
});

/**
 * A gateway whose clock stays at the start of a minute: a budget spent over a minute boundary of
 * the real clock (a slow run) started over and the next request was admitted.
 */
const heldGateway = (options: { trustedProxies?: string[] } = {}) =>
  testGateway({ ...options, now: () => Date.parse("2030-01-01T10:00:00Z") });

/** Spends one client's whole per-address budget on the shared key, then asks for one more. */
async function exhaust(gateway: TestGateway, client: string): Promise<number> {
  for (let sent = 0; sent < sharedKeyPerIpPerMinute; sent++) {
    const res = await post(gateway, "/v1/chat/completions", chat(), sharedFrom(client));
    expect(res.status).toBe(200);
  }
  return (await post(gateway, "/v1/chat/completions", chat(), sharedFrom(client))).status;
}

describe("the shared key's per-address limit", () => {
  it("counts each forwarded client of a trusted proxy on its own, and ignores an untrusted peer's header", async () => {
    gw = await heldGateway({ trustedProxies: ["127.0.0.1"] });
    expect(await exhaust(gw, "203.0.113.7")).toBe(429);
    const other = await post(gw, "/v1/chat/completions", chat(), sharedFrom("198.51.100.9"));
    expect(other.status).toBe(200);
    await gw.close();

    gw = await heldGateway();
    expect(await exhaust(gw, "203.0.113.7")).toBe(429);
    const shared = await post(gw, "/v1/chat/completions", chat(), sharedFrom("198.51.100.9"));
    expect(shared.status).toBe(429);
  });

  it("takes the right-most address that is not a trusted proxy: the left ones are the client's word", async () => {
    gw = await heldGateway({ trustedProxies: ["127.0.0.1", "10.0.0.5"] });
    expect(await exhaust(gw, "192.0.2.1, 203.0.113.7, 10.0.0.5")).toBe(429);
    // A client that writes its own header in front still ends up as the same address.
    const spoofed = await post(
      gw,
      "/v1/chat/completions",
      chat(),
      sharedFrom("198.51.100.9, 203.0.113.7"),
    );
    expect(spoofed.status).toBe(429);
    const other = await post(gw, "/v1/chat/completions", chat(), sharedFrom("198.51.100.9"));
    expect(other.status).toBe(200);
  });

  it("trusts every address of a CIDR range, and no address outside it", async () => {
    gw = await heldGateway({ trustedProxies: ["127.0.0.0/8", "fd00::/8"] });
    expect(await exhaust(gw, "203.0.113.7")).toBe(429);
    const other = await post(gw, "/v1/chat/completions", chat(), sharedFrom("198.51.100.9"));
    expect(other.status).toBe(200);
    // An entry inside a trusted range is a proxy too: the client is the one left of it.
    expect(await exhaust(gw, "192.0.2.44, 127.0.0.9")).toBe(429);
    await gw.close();

    gw = await heldGateway({ trustedProxies: ["10.0.0.0/8"] });
    expect(await exhaust(gw, "203.0.113.7")).toBe(429);
    const shared = await post(gw, "/v1/chat/completions", chat(), sharedFrom("198.51.100.9"));
    expect(shared.status).toBe(429);
  });

  it("compares addresses in one spelling: a proxy listed as an IPv4-mapped address matches", async () => {
    gw = await heldGateway({ trustedProxies: ["::ffff:127.0.0.1"] });
    expect(await exhaust(gw, "203.0.113.7")).toBe(429);
    const other = await post(gw, "/v1/chat/completions", chat(), sharedFrom("198.51.100.9"));
    expect(other.status).toBe(200);
  });
});

async function verificationUri(gateway: TestGateway, headers: Record<string, string>) {
  const res = await post(gateway, "/api/auth/device/code", { client_name: "proxy test" }, headers);
  expect(res.status).toBe(200);
  return ((await res.json()) as { verification_uri: string }).verification_uri;
}

const forwardedTls = {
  "x-forwarded-proto": "https",
  "x-forwarded-host": "gateway.example.com",
};

describe("the origin URLs are handed out at", () => {
  it("follows X-Forwarded-Proto and X-Forwarded-Host from a trusted proxy, not from another peer", async () => {
    gw = await testGateway({ trustedProxies: ["127.0.0.1"] });
    expect(await verificationUri(gw, forwardedTls)).toBe(
      "https://gateway.example.com/dashboard/device",
    );
    expect(await verificationUri(gw, {})).toBe(`${gw.url}/dashboard/device`);
    await gw.close();

    gw = await testGateway({ trustedProxies: ["10.0.0.5"] });
    expect(await verificationUri(gw, forwardedTls)).toBe(`${gw.url}/dashboard/device`);
  });

  it("ignores a forwarded host that is more than a host and port", async () => {
    gw = await testGateway({ trustedProxies: ["127.0.0.1"] });
    const uri = await verificationUri(gw, {
      "x-forwarded-proto": "https",
      "x-forwarded-host": "evil.example@gateway.example.com/x",
    });
    expect(uri).toBe(`https://${new URL(gw.url).host}/dashboard/device`);
  });

  it("is the public URL when one is set, whatever a trusted proxy says", async () => {
    gw = await testGateway({
      trustedProxies: ["127.0.0.1"],
      publicUrl: "https://public.example.org/",
    });
    expect(await verificationUri(gw, forwardedTls)).toBe(
      "https://public.example.org/dashboard/device",
    );
  });
});

describe("the owner session cookie", () => {
  async function sessionCookie(gateway: TestGateway, headers: Record<string, string>) {
    const res = await fetch(gateway.ownerUrl!, { redirect: "manual", headers });
    expect(res.status).toBe(303);
    const cookie = res.headers.getSetCookie().find((line) => line.startsWith("gateway_session"));
    expect(cookie).toBeDefined();
    return cookie!;
  }

  it("is Secure when a trusted proxy says the client came over https, and only then", async () => {
    gw = await testGateway({ trustedProxies: ["127.0.0.1"] });
    expect(await sessionCookie(gw, { "x-forwarded-proto": "https" })).toMatch(/; Secure/);
    await gw.close();

    gw = await testGateway({ trustedProxies: ["127.0.0.1"] });
    expect(await sessionCookie(gw, { "x-forwarded-proto": "http" })).not.toMatch(/Secure/);
    await gw.close();

    gw = await testGateway();
    expect(await sessionCookie(gw, { "x-forwarded-proto": "https" })).not.toMatch(/Secure/);
  });
});

describe("the setting", () => {
  it("refuses an entry that is neither an IP address nor a CIDR range", async () => {
    for (const entry of [
      "proxy.internal",
      "10.0.0.0/33",
      "fd00::/129",
      "10.0.0.0/8/8",
      "10.0.0.0/",
    ]) {
      await expect(testGateway({ trustedProxies: [entry] })).rejects.toThrow(
        `invalid trusted proxy:\n  - must be an IPv4 or IPv6 address or a CIDR range (10.0.0.0/8), got "${entry}"`,
      );
    }
  });
});
