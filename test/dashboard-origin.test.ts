import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { dashboardCsrf, ownerSession } from "./support/cli.js";
import { type TestGateway, testGateway } from "./support/gateway.js";

/**
 * The dashboard's same-origin checks compare a browser's Origin with the gateway's own address
 * (the configured public URL, else the listening address), never with the request's Host header,
 * which a rebinding page controls together with its Origin.
 */

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

async function createKeyForm(g: TestGateway, headers: Record<string, string>): Promise<number> {
  const owner = await ownerSession(g);
  const csrf = await dashboardCsrf(g, owner);
  const res = await request(`${g.url}/dashboard/keys`, {
    method: "POST",
    headers: {
      cookie: owner.cookie,
      "content-type": "application/x-www-form-urlencoded",
      ...headers,
    },
    body: new URLSearchParams({ label: "from a form", csrf_token: csrf }).toString(),
  });
  await res.body.text();
  // A created key is shown by the page the form redirects to (post/redirect/get).
  if (res.statusCode === 303) expect(res.headers.location).toBe("/dashboard");
  return res.statusCode;
}

describe("same-origin checks", () => {
  it("a page whose Host and Origin agree on another name is refused (DNS rebinding)", async () => {
    gw = await testGateway();
    const port = new URL(gw.url).port;
    const rebinding = { host: `evil.example:${port}`, origin: `http://evil.example:${port}` };
    expect(await createKeyForm(gw, rebinding)).toBe(403);
    expect(await createKeyForm(gw, { origin: gw.url })).toBe(303);

    const api = await request(`${gw.url}/api/auth/device/code`, {
      method: "POST",
      headers: { "content-type": "application/json", ...rebinding },
      body: "{}",
    });
    expect(api.statusCode).toBe(403);
    await api.body.text();
  });

  it("with a public URL, that origin is the one accepted and the owner link uses it", async () => {
    gw = await testGateway({ publicUrl: "https://gateway.example.com/" });
    expect(gw.ownerUrl).toMatch(/^https:\/\/gateway\.example\.com\/dashboard\/login\?token=/);
    expect(await createKeyForm(gw, { origin: "https://gateway.example.com" })).toBe(303);
    expect(await createKeyForm(gw, { origin: gw.url })).toBe(403);
  });

  it("refuses a public URL that is not http(s)", async () => {
    await expect(testGateway({ publicUrl: "ftp://gateway.example.com" })).rejects.toThrow(
      /public URL/,
    );
  });
});
