// The floor for any Node gateway on this machine: a bare Hono app that parses the body and
// forwards it with pooled undici, with no auth, limits, billing or log. The benchmark runs it
// beside the gateway so the gateway's own cost is the difference between the two rows.
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import { Agent } from "undici";

export async function startBareProxy(upstreamUrl) {
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 256 });
  const origin = new URL(upstreamUrl).origin;
  const app = new Hono();
  app.post("/v1/chat/completions", async (c) => {
    const body = JSON.parse(await c.req.text());
    const upstream = await agent.request({
      origin,
      path: "/v1/chat/completions",
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    if (body.stream) {
      return new Response(upstream.body, { headers: { "content-type": "text/event-stream" } });
    }
    return c.json(await upstream.body.json());
  });
  const server = await new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve(s));
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: async () => {
      await new Promise((resolve) => server.close(resolve));
      await agent.close();
    },
  };
}

// As a child process (`--child <upstream URL>`), so its memory can be read on its own: it reports
// its URL over IPC and goes when the parent does.
if (process.send && process.argv.includes("--child")) {
  const proxy = await startBareProxy(process.argv[process.argv.indexOf("--child") + 1]);
  process.send({ url: proxy.url });
  process.on("disconnect", () => process.exit(0));
}
