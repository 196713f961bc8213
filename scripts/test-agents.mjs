// Opt-in end-to-end check: real coding agents, headless, through the gateway.
//
//   npm run test:agents              build, install the CLIs into a temp prefix, run every case
//   AGENTS_ONLY=claude-same node scripts/test-agents.mjs
//   AGENTS_LOG=1 ...                 print every request the fake upstream gets (tool names, shapes)
//   AGENTS_CLI_PREFIX=/tmp/cli ...   reuse CLIs installed there (npm install --prefix) instead
//
// Each case runs Claude Code (`claude -p`) or the Codex CLI (`codex exec`) in a temporary HOME and
// working directory, telemetry off, against `startGateway` with one kn- key. Behind the gateway a
// scripted fake provider speaks both wires (Anthropic Messages, OpenAI chat completions): while
// the conversation has no tool result it answers with a call to the agent's own shell tool,
// `echo <marker> > marker.txt`; once the result comes back it answers with a final text. A case
// passes when the agent exits 0 and the file holds the marker, so the agent's tool really ran.
// "same" cases reach a provider of the agent's own wire, "cross" cases the other wire, and
// "codex-bridge" an openai provider without the Responses API (translated to chat completions).
// "claude-older" is an alias of an older Claude model, same wire: Claude Code does not know the
// name, so it sends `role: "system"` items inside `messages`; the older model refuses them, and
// Claude Code must recognise the gateway's 400 and resend without them.
// "claude-mcp" adds the gateway's MCP server to Claude Code with the command `gateway mcp` prints
// (`claude mcp add --transport http ...`); the scripted upstream asks it to call the server's
// generate_image tool, and the case passes when the tool's result reaches the upstream as a PNG
// image and the gateway logged the image request as coming from MCP.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startGateway } from "../dist/index.js";

// The newest releases, checked on Node 20: both install a native binary, so Claude Code's
// `engines: node >=22` does not bind it. Override to try others.
const CLAUDE_PACKAGE = process.env.AGENTS_CLAUDE_PACKAGE ?? "@anthropic-ai/claude-code@2.1.332";
const CODEX_PACKAGE = process.env.AGENTS_CODEX_PACKAGE ?? "@openai/codex@0.171.0";
const CASE_TIMEOUT_MS = Number(process.env.AGENTS_CASE_TIMEOUT_MS ?? 120_000);
const log = process.env.AGENTS_LOG === "1";
const only = process.env.AGENTS_ONLY?.split(",");
const KEY = `kn-agents-${randomBytes(16).toString("hex")}`;

const root = mkdtempSync(join(tmpdir(), "gateway-agents-"));
const cleanups = [() => rmSync(root, { recursive: true, force: true })];

// ---- the scripted provider ---------------------------------------------------------

/** The shell tools the agents offer, and the input each takes to run one command. */
const shellTools = {
  Bash: (command) => ({ command, description: "Write the marker file" }),
  shell: (command) => ({ command: ["bash", "-lc", command] }),
  shell_command: (command) => ({ command }),
  exec_command: (command) => ({ cmd: command }),
  local_shell: (command) => ({ command: ["bash", "-lc", command] }),
};

const shellToolOf = (names) => names.find((name) => name in shellTools);

let marker = "";
const seen = [];
let refused = 0;

/** The MCP case: Claude Code's name for the gateway's image tool, and whether its image came back. */
const mcpImageTool = "mcp__model-gateway__generate_image";
let mode = "shell";
let imageBack = false;

const PNG_SIGNATURE = "iVBORw0KGgo";

/** Whether a Messages body carries a tool result holding a PNG image (what generate_image returns). */
function toolResultHasPng(body) {
  return (body.messages ?? []).some(
    (m) =>
      Array.isArray(m.content) &&
      m.content.some(
        (b) =>
          b.type === "tool_result" &&
          Array.isArray(b.content) &&
          b.content.some(
            (c) =>
              c.type === "image" &&
              c.source?.media_type === "image/png" &&
              String(c.source?.data ?? "").startsWith(PNG_SIGNATURE),
          ),
      ),
  );
}

function readBody(req) {
  return new Promise((resolve) => {
    const parts = [];
    req.on("data", (chunk) => parts.push(chunk));
    req.on("end", () => resolve(Buffer.concat(parts).toString("utf8")));
  });
}

/** What to answer next: a shell call while no tool result has come back, then the final text. */
/** Whether the conversation already holds a call of `name` (Messages content blocks). */
function called(body, name) {
  return (body.messages ?? []).some(
    (m) =>
      Array.isArray(m.content) && m.content.some((b) => b.type === "tool_use" && b.name === name),
  );
}

/**
 * The MCP case: call the gateway's image tool, first loading it with ToolSearch where Claude Code
 * defers MCP tools behind it (later releases do), then answer once the image came back.
 */
function mcpPlan(toolNames, body) {
  if (toolResultHasPng(body)) return { text: `Made the image for ${marker}.` };
  if (toolNames.includes(mcpImageTool)) {
    if (called(body, mcpImageTool)) return { text: "The image tool returned no image." };
    return { tool: mcpImageTool, input: { model: "mock-image", prompt: marker, size: "64x64" } };
  }
  if (toolNames.includes("ToolSearch") && !called(body, "ToolSearch")) {
    return { tool: "ToolSearch", input: { query: `select:${mcpImageTool}` } };
  }
  return { text: "OK." };
}

function plan(toolNames, hasToolResult, body = {}) {
  if (mode === "mcp-image") return mcpPlan(toolNames, body);
  const tool = shellToolOf(toolNames);
  if (!tool || hasToolResult) return { text: hasToolResult ? `Wrote ${marker}.` : "OK." };
  return { tool, input: shellTools[tool](`echo ${marker} > marker.txt`) };
}

/** Upstream names of models that refuse `system` items inside `messages`, whatever the betas. */
const refusesSystemInMessages = new Set(["claude-3-5-haiku-20241022"]);

/** The checks the real APIs make that translation can break: roles, and results after their calls. */
function invalidBody(path, body, headers) {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  if (path === "/v1/messages") {
    const midConversationSystem =
      !refusesSystemInMessages.has(body.model) &&
      String(headers["anthropic-beta"] ?? "").includes("mid-conversation-system-2026-04-07");
    const called = new Set();
    for (const [i, m] of messages.entries()) {
      if (m.role === "system" && midConversationSystem) continue;
      if (m.role !== "user" && m.role !== "assistant") {
        return `messages.${i}.role: Input should be 'user' or 'assistant'`;
      }
      for (const block of Array.isArray(m.content) ? m.content : []) {
        if (block.type === "tool_use") called.add(block.id);
        if (block.type === "tool_result" && !called.has(block.tool_use_id)) {
          return `messages.${i}: tool_result ${block.tool_use_id} has no tool_use before it`;
        }
      }
    }
  }
  if (path === "/v1/chat/completions") {
    const called = new Set();
    for (const [i, m] of messages.entries()) {
      for (const call of m.tool_calls ?? []) called.add(call.id);
      if (m.role === "tool" && !called.has(m.tool_call_id)) {
        return `messages.${i}: tool message ${m.tool_call_id} answers no tool call`;
      }
    }
  }
  return null;
}

function anthropicAnswer(body) {
  const names = (body.tools ?? []).map((t) => t.name).filter(Boolean);
  const hasToolResult = (body.messages ?? []).some(
    (m) => Array.isArray(m.content) && m.content.some((b) => b.type === "tool_result"),
  );
  if (toolResultHasPng(body)) imageBack = true;
  const next = plan(names, hasToolResult, body);
  const id = `msg_${randomBytes(6).toString("hex")}`;
  const content = next.tool
    ? [
        {
          type: "tool_use",
          id: `toolu_${randomBytes(6).toString("hex")}`,
          name: next.tool,
          input: next.input,
        },
      ]
    : [{ type: "text", text: next.text }];
  const message = {
    id,
    type: "message",
    role: "assistant",
    model: body.model,
    content,
    stop_reason: next.tool ? "tool_use" : "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 50, output_tokens: 10 },
  };
  if (!body.stream) return { json: message };
  const events = [
    [
      "message_start",
      {
        type: "message_start",
        message: {
          ...message,
          content: [],
          stop_reason: null,
          usage: { input_tokens: 50, output_tokens: 1 },
        },
      },
    ],
  ];
  content.forEach((block, index) => {
    if (block.type === "text") {
      events.push(
        [
          "content_block_start",
          { type: "content_block_start", index, content_block: { type: "text", text: "" } },
        ],
        [
          "content_block_delta",
          { type: "content_block_delta", index, delta: { type: "text_delta", text: block.text } },
        ],
      );
    } else {
      events.push(
        [
          "content_block_start",
          { type: "content_block_start", index, content_block: { ...block, input: {} } },
        ],
        [
          "content_block_delta",
          {
            type: "content_block_delta",
            index,
            delta: { type: "input_json_delta", partial_json: JSON.stringify(block.input) },
          },
        ],
      );
    }
    events.push(["content_block_stop", { type: "content_block_stop", index }]);
  });
  events.push(
    [
      "message_delta",
      {
        type: "message_delta",
        delta: { stop_reason: message.stop_reason, stop_sequence: null },
        usage: { output_tokens: 10 },
      },
    ],
    ["message_stop", { type: "message_stop" }],
  );
  return {
    sse: events.map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`),
  };
}

function chatAnswer(body) {
  const names = (body.tools ?? []).map((t) => t.function?.name ?? t.name).filter(Boolean);
  const hasToolResult = (body.messages ?? []).some((m) => m.role === "tool");
  const next = plan(names, hasToolResult);
  const id = `chatcmpl-${randomBytes(6).toString("hex")}`;
  const created = Math.floor(Date.now() / 1000);
  const call = next.tool && {
    id: `call_${randomBytes(6).toString("hex")}`,
    type: "function",
    function: { name: next.tool, arguments: JSON.stringify(next.input) },
  };
  const finish = call ? "tool_calls" : "stop";
  const usage = { prompt_tokens: 50, completion_tokens: 10, total_tokens: 60 };
  if (!body.stream) {
    return {
      json: {
        id,
        object: "chat.completion",
        created,
        model: body.model,
        choices: [
          {
            index: 0,
            message: {
              role: "assistant",
              content: call ? null : next.text,
              ...(call ? { tool_calls: [call] } : {}),
            },
            finish_reason: finish,
          },
        ],
        usage,
      },
    };
  }
  const chunk = (delta, finish_reason = null, extra = {}) => ({
    id,
    object: "chat.completion.chunk",
    created,
    model: body.model,
    choices: [{ index: 0, delta, finish_reason }],
    ...extra,
  });
  const chunks = [chunk({ role: "assistant", content: call ? null : "" })];
  if (call) chunks.push(chunk({ tool_calls: [{ index: 0, ...call }] }));
  else chunks.push(chunk({ content: next.text }));
  chunks.push(chunk({}, finish), {
    id,
    object: "chat.completion.chunk",
    created,
    model: body.model,
    choices: [],
    usage,
  });
  return { sse: [...chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`), "data: [DONE]\n\n"] };
}

/** The OpenAI Responses API, as Codex speaks it: function calls and messages as output items. */
function responsesAnswer(body) {
  const tools = body.tools ?? [];
  const names = tools.map((t) => t.name ?? t.type).filter(Boolean);
  const input = Array.isArray(body.input) ? body.input : [];
  const hasToolResult = input.some((item) => /_call_output$/.test(item.type ?? ""));
  const next = plan(names, hasToolResult);
  const id = `resp_${randomBytes(6).toString("hex")}`;
  const tool = next.tool && tools.find((t) => (t.name ?? t.type) === next.tool);
  let item;
  if (!next.tool) {
    item = {
      type: "message",
      id: `msg_${randomBytes(6).toString("hex")}`,
      role: "assistant",
      status: "completed",
      content: [{ type: "output_text", text: next.text, annotations: [] }],
    };
  } else if (tool?.type === "local_shell") {
    item = {
      type: "local_shell_call",
      id: `lsh_${randomBytes(6).toString("hex")}`,
      call_id: `call_${randomBytes(6).toString("hex")}`,
      status: "completed",
      action: { type: "exec", command: next.input.command },
    };
  } else {
    item = {
      type: "function_call",
      id: `fc_${randomBytes(6).toString("hex")}`,
      call_id: `call_${randomBytes(6).toString("hex")}`,
      name: next.tool,
      arguments: JSON.stringify(next.input),
      status: "completed",
    };
  }
  const usage = {
    input_tokens: 50,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 10,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 60,
  };
  const response = (status, output) => ({
    id,
    object: "response",
    created_at: Math.floor(Date.now() / 1000),
    status,
    model: body.model,
    output,
    usage: status === "completed" ? usage : null,
  });
  if (!body.stream) return { json: response("completed", [item]) };
  let sequence_number = 0;
  const event = (type, data) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence_number++, ...data })}\n\n`;
  const sse = [
    event("response.created", { response: response("in_progress", []) }),
    event("response.output_item.added", { output_index: 0, item }),
  ];
  if (item.type === "message") {
    sse.push(
      event("response.output_text.delta", {
        item_id: item.id,
        output_index: 0,
        content_index: 0,
        delta: next.text,
      }),
    );
  }
  sse.push(
    event("response.output_item.done", { output_index: 0, item }),
    event("response.completed", { response: response("completed", [item]) }),
  );
  return { sse };
}

async function startFakeProvider() {
  const server = createServer(async (req, res) => {
    const raw = await readBody(req);
    let body = {};
    try {
      body = JSON.parse(raw);
    } catch {}
    seen.push({ path: req.url, body });
    if (log) {
      const tools = (body.tools ?? []).map((t) => t.name ?? t.function?.name ?? t.type);
      console.log(
        `[fake] ${req.method} ${req.url} stream=${body.stream} tools=${JSON.stringify(tools)}`,
      );
      console.log(`[fake]   ${raw.slice(0, 1500)}`);
    }
    let answer;
    const invalid = invalidBody(req.url, body, req.headers);
    if (invalid) {
      refused++;
      console.log(`[fake] refused ${req.url}: ${invalid}`);
      res.writeHead(400, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          type: "error",
          error: { type: "invalid_request_error", message: invalid },
        }),
      );
      return;
    }
    if (req.url === "/v1/messages/count_tokens") answer = { json: { input_tokens: 100 } };
    else if (req.url === "/v1/messages") answer = anthropicAnswer(body);
    else if (req.url === "/v1/chat/completions") answer = chatAnswer(body);
    else if (req.url === "/v1/responses") answer = responsesAnswer(body);
    else {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: `no fake for ${req.url}` } }));
      return;
    }
    if (answer.json) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(answer.json));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    for (const piece of answer.sse) res.write(piece);
    res.end();
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(
    () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
  return `http://127.0.0.1:${server.address().port}/v1`;
}

// ---- the CLIs ----------------------------------------------------------------------------

function run(command, args, options) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { ...options, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeout ?? CASE_TIMEOUT_MS);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out });
    });
    child.on("error", (err) => {
      clearTimeout(timer);
      resolve({ code: -1, signal: null, out: String(err) });
    });
  });
}

async function installClis() {
  const prefix = process.env.AGENTS_CLI_PREFIX ?? join(root, "cli");
  const bin = join(prefix, "node_modules", ".bin");
  if (existsSync(join(bin, "claude")) && existsSync(join(bin, "codex"))) return bin;
  console.log(`installing ${CLAUDE_PACKAGE} and ${CODEX_PACKAGE} into ${prefix} ...`);
  const installed = await run(
    "npm",
    [
      "install",
      "--prefix",
      prefix,
      "--no-audit",
      "--no-fund",
      "--no-save",
      CLAUDE_PACKAGE,
      CODEX_PACKAGE,
    ],
    { timeout: 600_000, env: process.env },
  );
  if (installed.code !== 0) throw new Error(`npm install failed:\n${installed.out}`);
  return bin;
}

/** A clean environment: temporary HOME, no inherited keys or proxies, telemetry off. */
function agentEnv(home) {
  const keep = ["PATH", "LANG", "TERM", "TMPDIR"];
  const env = Object.fromEntries(
    keep.filter((k) => process.env[k]).map((k) => [k, process.env[k]]),
  );
  return {
    ...env,
    HOME: home,
    XDG_CONFIG_HOME: join(home, ".config"),
    CODEX_HOME: join(home, ".codex"),
    NO_PROXY: "127.0.0.1,localhost",
    DISABLE_TELEMETRY: "1",
    DISABLE_ERROR_REPORTING: "1",
    DISABLE_AUTOUPDATER: "1",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    CLAUDE_CODE_ENABLE_TELEMETRY: "0",
    OTEL_SDK_DISABLED: "true",
  };
}

function claudeCase(bin, gatewayUrl, model) {
  return (home, work) =>
    run(
      join(bin, "claude"),
      [
        "-p",
        "Create the marker file using your shell tool.",
        "--model",
        model,
        "--allowedTools",
        "Bash",
        "--output-format",
        "json",
      ],
      {
        cwd: work,
        env: { ...agentEnv(home), ANTHROPIC_BASE_URL: gatewayUrl, ANTHROPIC_API_KEY: KEY },
      },
    );
}

/**
 * Claude Code with the gateway's MCP server added as `gateway mcp claude-code` prints it, asked
 * for an image: the scripted model calls generate_image and the tool's PNG must come back.
 */
function claudeMcpCase(bin, gatewayUrl, model) {
  return async (home, work) => {
    const env = {
      ...agentEnv(home),
      ANTHROPIC_BASE_URL: gatewayUrl,
      ANTHROPIC_API_KEY: KEY,
      // Headless Claude Code may send its first request before MCP servers are connected (their
      // tools then missing from it); this makes it wait for them, as an interactive session does.
      MCP_CONNECTION_NONBLOCKING: "false",
    };
    const added = await run(
      join(bin, "claude"),
      [
        "mcp",
        "add",
        "--transport",
        "http",
        "model-gateway",
        `${gatewayUrl}/mcp`,
        "--header",
        `Authorization: Bearer ${KEY}`,
      ],
      { cwd: work, env },
    );
    if (added.code !== 0) return added;
    return run(
      join(bin, "claude"),
      [
        "-p",
        "Make a picture of a lighthouse with the gateway's image tool.",
        "--model",
        model,
        "--allowedTools",
        mcpImageTool,
        "--output-format",
        "json",
      ],
      { cwd: work, env },
    );
  };
}

/** The MCP case passes when the image reached the upstream and the gateway logged it as MCP's. */
async function imageCameBack(gw) {
  const logged = await gw.listRequests({ limit: 20 });
  const viaMcp = logged.some((r) => r.endpoint === "images.generations" && r.via === "mcp");
  return {
    ok: imageBack && viaMcp,
    detail: `image in a tool result: ${imageBack}, logged via MCP: ${viaMcp}`,
  };
}

/** The shell cases pass when the agent's shell tool wrote the marker file. */
function markerWritten(work) {
  const file = join(work, "marker.txt");
  const wrote = existsSync(file) ? readFileSync(file, "utf8").trim() : "";
  return {
    ok: wrote === marker,
    detail: `marker.txt: ${wrote ? JSON.stringify(wrote) : "missing"}`,
  };
}

function codexCase(bin, gatewayUrl, model) {
  const provider = `{ name = "gateway", base_url = "${gatewayUrl}/v1", env_key = "GATEWAY_KEY", wire_api = "responses" }`;
  return (home, work) =>
    run(
      join(bin, "codex"),
      [
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-c",
        `model_providers.gateway=${provider}`,
        "-c",
        "model_provider=gateway",
        "-c",
        'otel.exporter="none"',
        "-c",
        "analytics.enabled=false",
        "-m",
        model,
        "Create the marker file using your shell tool.",
      ],
      { cwd: work, env: { ...agentEnv(home), GATEWAY_KEY: KEY } },
    );
}

// ---- main ---------------------------------------------------------------------------------

async function main() {
  const bin = await installClis();
  const providerUrl = await startFakeProvider();
  const gw = await startGateway({
    db: join(root, "gateway.db"),
    port: 0,
    config: {
      providers: [
        { id: "mock", wire: "mock" },
        { id: "fake-anthropic", wire: "anthropic", base_url: providerUrl, api_keys: ["sk-fake-a"] },
        { id: "fake-openai", wire: "openai", base_url: providerUrl, api_keys: ["sk-fake-o"] },
        // Codex speaks the Responses API: same-wire is an openai provider that serves it natively.
        {
          id: "fake-openai-responses",
          wire: "openai",
          base_url: providerUrl,
          api_keys: ["sk-fake-r"],
          responses_native: true,
        },
      ],
      models: [
        { name: "claude-sonnet-4-5", provider: "fake-anthropic", max_output_tokens: 64_000 },
        // An alias Claude Code does not know, of an older model that refuses system messages.
        {
          name: "claude-older",
          provider: "fake-anthropic",
          upstream_model: "claude-3-5-haiku-20241022",
          max_output_tokens: 64_000,
        },
        { name: "claude-via-openai", provider: "fake-openai", max_output_tokens: 64_000 },
        { name: "gpt-5-codex", provider: "fake-openai-responses", max_output_tokens: 64_000 },
        { name: "gpt-via-anthropic", provider: "fake-anthropic", max_output_tokens: 64_000 },
        { name: "gpt-via-chat", provider: "fake-openai", max_output_tokens: 64_000 },
        { name: "mock-image", provider: "mock", modality: "image", price_per_unit: 500 },
      ],
      accounts: [
        { id: "agents", balance_idr: 1_000_000, rpm_limit: 1000, keys: [{ id: "k", value: KEY }] },
      ],
    },
  });
  cleanups.push(() => gw.close());

  const cases = [
    ["claude-same", claudeCase(bin, gw.url, "claude-sonnet-4-5")],
    ["claude-older", claudeCase(bin, gw.url, "claude-older")],
    ["claude-cross", claudeCase(bin, gw.url, "claude-via-openai")],
    ["codex-same", codexCase(bin, gw.url, "gpt-5-codex")],
    ["codex-cross", codexCase(bin, gw.url, "gpt-via-anthropic")],
    // The Responses API bridged onto chat completions: the same vendor's wire, translated.
    ["codex-bridge", codexCase(bin, gw.url, "gpt-via-chat")],
    // The gateway as Claude Code's MCP server: its image tool, on the same key.
    [
      "claude-mcp",
      claudeMcpCase(bin, gw.url, "claude-sonnet-4-5"),
      () => imageCameBack(gw),
      "mcp-image",
    ],
  ].filter(([name]) => !only || only.includes(name));

  const results = [];
  for (const [name, start, check, caseMode = "shell"] of cases) {
    const home = join(root, name, "home");
    const work = join(root, name, "work");
    mkdirSync(join(home, ".codex"), { recursive: true });
    mkdirSync(work, { recursive: true });
    marker = `MARKER-${name}-${randomBytes(4).toString("hex")}`;
    mode = caseMode;
    imageBack = false;
    seen.length = 0;
    refused = 0;
    const began = Date.now();
    const ran = await start(home, work);
    const checked = check ? await check() : markerWritten(work);
    const ok = ran.code === 0 && checked.ok;
    const seconds = ((Date.now() - began) / 1000).toFixed(1);
    results.push({ name, ok });
    console.log(
      `${ok ? "PASS" : "FAIL"} ${name} (${seconds} s, exit ${ran.code ?? ran.signal}, ${seen.length} upstream requests, ${refused} refused)`,
    );
    if (!ok || log) {
      console.log(
        ran.out
          .trim()
          .split("\n")
          .slice(-30)
          .map((l) => `    ${l}`)
          .join("\n"),
      );
      if (!ok) console.log(`    ${checked.detail}`);
    }
  }
  return results.every((r) => r.ok);
}

let passed = false;
try {
  passed = await main();
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
} finally {
  for (const cleanup of cleanups.reverse()) await cleanup();
}
process.exit(passed ? 0 : 1);
