// A CommonJS app requires the package: the `require` entry loads the ESM build on first use.
const assert = require("node:assert/strict");
const { startGateway, load } = require("model-gateway");

const KEY = "kn-example-cjs-key-0000000000000";

(async () => {
  const gateway = await startGateway({
    db: ":memory:",
    clock: "manual",
    config: {
      providers: [{ id: "mock", wire: "mock" }],
      models: [{ name: "app-model", provider: "mock", price_input_per_mtok: 1000 }],
      accounts: [{ id: "app", balance_idr: 1000, keys: [{ id: "ci", value: KEY }] }],
    },
  });
  try {
    gateway.mock.reply({ reply: { text: "hello from CommonJS" } });
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "app-model", messages: [{ role: "user", content: "hi" }] }),
    });
    assert.equal(res.status, 200);
    assert.equal((await res.json()).choices[0].message.content, "hello from CommonJS");
    const before = gateway.clock.now();
    assert.equal(gateway.clock.advance(1000), before + 1000);
    const { ConfigError } = await load();
    assert.equal(typeof ConfigError, "function");
    console.log("consumer.cjs: ok");
  } finally {
    await gateway.close();
  }
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
