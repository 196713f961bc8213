import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { admin } from "./support/api.js";
import { dashboardCsrf, type OwnerBrowser, ownerSession } from "./support/cli.js";
import { backends, baseConfigWith, gatewayOn, type TestGateway } from "./support/gateway.js";

/**
 * A BYOK key's label is counted as every other label is (characters: an emoji is one, though it
 * is two UTF-16 units) wherever it is given: the dashboard's form, its JSON twin, the admin API.
 * Over 100 characters is refused, never cut, so no label ends in half an emoji.
 */

/** 99 letters and an emoji: 100 characters, 101 UTF-16 units. */
const emojiAtTheEnd = `${"a".repeat(99)}🔑`;
/** 100 characters, each of them two UTF-16 units. */
const hundredEmoji = "🔑".repeat(100);
const tooLong = `${emojiAtTheEnd}!`;

/** A lone half of a surrogate pair: what a cut in UTF-16 units leaves of an emoji. */
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

describe.each(backends)("a BYOK key's label (%s)", (backend) => {
  let gw: TestGateway;
  let owner: OwnerBrowser;
  let csrf: string;

  beforeAll(async () => {
    gw = await gatewayOn(backend, {
      config: baseConfigWith({
        providers: [{ id: "openai", wire: "openai", base_url: "http://127.0.0.1:9/v1" }],
      }),
    });
    owner = await ownerSession(gw);
    csrf = await dashboardCsrf(gw, owner);
  });
  afterAll(() => gw?.close());

  const dashboardApi = (method: string, path: string, body?: unknown) =>
    fetch(`${gw.url}/api/dashboard${path}`, {
      method,
      headers: { cookie: owner.cookie, "x-csrf-token": csrf, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });

  const form = async (fields: Record<string, string>) => {
    const res = await fetch(`${gw.url}/dashboard/byok`, {
      method: "POST",
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        cookie: owner.cookie,
        origin: gw.url,
      },
      body: new URLSearchParams({ ...fields, csrf_token: csrf }).toString(),
      redirect: "manual",
    });
    return { status: res.status, html: await res.text() };
  };

  const listedLabels = async (): Promise<string[]> =>
    ((await (await dashboardApi("GET", "/byok")).json()) as { data: { label: string }[] }).data.map(
      (b) => b.label,
    );

  const page = async () =>
    (await fetch(`${gw.url}/dashboard`, { headers: { cookie: owner.cookie } })).text();

  it("the dashboard's form keeps 100 characters whole, an emoji at the end included, and refuses the 101st with the label kept as typed", async () => {
    for (const label of [emojiAtTheEnd, hundredEmoji]) {
      const added = await form({ provider: "openai", label, key: "sk-form-label-0001" });
      expect(added.status).toBe(303);
    }
    const labels = await listedLabels();
    expect(labels).toEqual(expect.arrayContaining([emojiAtTheEnd, hundredEmoji]));
    expect(labels.filter((label) => loneSurrogate.test(label))).toEqual([]);
    const shown = await page();
    expect(shown).toContain(`title="${emojiAtTheEnd}">${emojiAtTheEnd}</span>`);
    // The browser would count a maxlength in UTF-16 units, and stop at 50 emoji.
    expect(shown).not.toMatch(/<input name="label" maxlength=/);

    const before = labels.length;
    const refused = await form({ provider: "openai", label: tooLong, key: "sk-form-label-0002" });
    expect(refused.status).toBe(400);
    expect(refused.html).toContain(
      "A provider key&#39;s label can be at most 100 characters; this one has 101.",
    );
    expect(refused.html).toContain(
      `<input name="label" placeholder="optional" value="${tooLong}" aria-invalid="true" aria-describedby="byok-error" autofocus>`,
    );
    expect(refused.html).not.toContain("sk-form-label-0002");
    expect(await listedLabels()).toHaveLength(before);
  });

  it("the dashboard API and the admin API take 100 characters and refuse 101, counted alike", async () => {
    const viaDashboard = await dashboardApi("POST", "/byok", {
      provider: "openai",
      key: "sk-api-label-0001",
      label: ` ${emojiAtTheEnd} `,
    });
    expect(viaDashboard.status).toBe(201);
    expect(((await viaDashboard.json()) as { label: string }).label).toBe(emojiAtTheEnd);
    const viaAdmin = await admin(gw, "POST", "/accounts/acct/byok", {
      provider: "openai",
      key: "sk-api-label-0002",
      label: hundredEmoji,
    });
    expect(viaAdmin.status).toBe(201);
    expect(((await viaAdmin.json()) as { label: string }).label).toBe(hundredEmoji);

    for (const refused of [
      await dashboardApi("POST", "/byok", { provider: "openai", key: "sk-x-1", label: tooLong }),
      await admin(gw, "POST", "/accounts/acct/byok", {
        provider: "openai",
        key: "sk-x-2",
        label: `${hundredEmoji}🔑`,
      }),
    ]) {
      expect(refused.status).toBe(400);
      const body = (await refused.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe("bad_request");
      expect(body.error.message).toContain("at most 100 characters");
    }

    // A label left blank is none: the provider names the key, as the form does.
    const blank = await admin(gw, "POST", "/accounts/acct/byok", {
      provider: "openai",
      key: "sk-api-label-0003",
      label: "   ",
    });
    expect(blank.status).toBe(201);
    expect(((await blank.json()) as { label: string }).label).toBe("openai");
  });
});
