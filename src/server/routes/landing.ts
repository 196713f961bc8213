import { cliCommand } from "../../cli-command.js";
import { sendPage } from "../dashboard/http.js";
import { escapeHtml } from "../dashboard/pages.js";
import type { Handler } from "../http/context.js";

/** `GET /`: where to go from the bare address, for whoever opens it in a browser. */
export const landingHandler: Handler = (c) => sendPage(c, { status: 200, html: landingHtml() });

const landingHtml = () => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Model Gateway</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; padding: 0 1rem;
         color: #1b1b1b; line-height: 1.6; }
  code { background: #f3f3f3; padding: .1rem .3rem; }
</style>
</head>
<body>
<main>
<h1>Model Gateway</h1>
<p>This gateway answers the OpenAI and Anthropic APIs under <code>/v1</code> with one <code>kn-</code> key.</p>
<ul>
<li><a href="/dashboard">Dashboard</a>: the owner's balance, usage and keys (open the owner link <code>gateway serve</code> printed, or run <code>${escapeHtml(cliCommand("owner-link"))}</code>)</li>
<li><a href="/v1/models">/v1/models</a>: the models and their prices</li>
<li><a href="/api/public/pricing">/api/public/pricing</a>: free limits per tier</li>
<li><a href="/health">/health</a> and <a href="/health/ready">/health/ready</a>; <code>/metrics</code> for Prometheus</li>
</ul>
<p>Point an SDK at <code>&lt;this address&gt;/v1</code>. A key for this machine's gateway:
<code>${escapeHtml(cliCommand("keys create --db gateway.db --label NAME"))}</code>. More: <code>${escapeHtml(cliCommand("--help"))}</code> and the package README.</p>
</main>
</body>
</html>
`;
