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
// "codex-openai" is Codex's built-in OpenAI provider pointed at the gateway (`openai_base_url`,
// `codex login --with-api-key`): it opens the Responses WebSocket first and must fall back to
// HTTP on the gateway's 426.
// The compaction cases run a session of two turns, the second past a low auto-compaction limit
// (Codex: `model_auto_compact_token_limit`, `codex exec` then `codex exec resume --last`) or after
// `/compact` (Claude Code: `claude -p`, then `--continue` with "/compact", then the next turn). The
// scripted model answers text only, and reports the tokens of what it was sent. A case passes when
// every run exits 0, the session was compacted (Codex prints "context compacted"; the summary
// Claude Code asked for reaches the next turn), the next turn was answered, every request the
// gateway logged was served (200) and the balance went down by exactly the cost of those rows.
// Codex compacts locally (an ordinary turn asking for a summary) on a provider of its config,
// and remotely on its OpenAI provider (a `compaction_trigger` last in `input`, then the
// `compaction` item sent back ahead of the next request): "codex-compact-*" and
// "codex-remote-compact-*", each on the mock and on a model bridged to chat completions, where the
// turn after the compaction must still carry Codex's instructions (its developer messages).
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
/** The compaction cases: the summaries the scripted model wrote. */
const summaries = [];

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

/** The text of the last message or input item of a request, whatever the wire. */
function lastText(body) {
  const items = Array.isArray(body.messages) ? body.messages : asItems(body.input);
  return JSON.stringify(items.at(-1)?.content ?? "");
}

const asItems = (input) => (Array.isArray(input) ? input : [{ content: input ?? "" }]);

/** How each asks for a summary: Codex's compact prompt, Claude Code's /compact, the gateway's. */
const summaryAsks = [
  /CONTEXT CHECKPOINT COMPACTION/,
  /create a detailed summary of the conversation/,
  /Summarize the conversation above/,
];

/** The compaction cases: a summary when asked for one, in Claude Code's blocks; else an answer. */
function textPlan(body) {
  const last = lastText(body);
  if (summaryAsks.some((ask) => ask.test(last))) {
    const summary = `SUMMARY-${marker}-${summaries.length + 1}`;
    summaries.push(summary);
    return {
      text: `<analysis>The user asked a question.</analysis>\n<summary>${summary}</summary>`,
    };
  }
  return { text: `ANSWER-${marker}` };
}

/** What the scripted model reports it read: four characters a token, as the agents estimate. */
const inputTokens = (body) => (mode === "text" ? Math.ceil(JSON.stringify(body).length / 4) : 50);

function plan(toolNames, hasToolResult, body = {}) {
  if (mode === "mcp-image") return mcpPlan(toolNames, body);
  if (mode === "text") return textPlan(body);
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
    usage: { input_tokens: inputTokens(body), output_tokens: 10 },
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
          usage: { input_tokens: inputTokens(body), output_tokens: 1 },
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
  const next = plan(names, hasToolResult, body);
  const id = `chatcmpl-${randomBytes(6).toString("hex")}`;
  const created = Math.floor(Date.now() / 1000);
  const call = next.tool && {
    id: `call_${randomBytes(6).toString("hex")}`,
    type: "function",
    function: { name: next.tool, arguments: JSON.stringify(next.input) },
  };
  const finish = call ? "tool_calls" : "stop";
  const prompt = inputTokens(body);
  const usage = { prompt_tokens: prompt, completion_tokens: 10, total_tokens: prompt + 10 };
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
  const next = plan(names, hasToolResult, body);
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
    input_tokens: inputTokens(body),
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 10,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: inputTokens(body) + 10,
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
      console.log(`[fake]   last: ${lastText(body).slice(0, 600)}`);
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
    const { input, ...spawnOptions } = options;
    const child = spawn(command, args, {
      ...spawnOptions,
      stdio: [input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    if (input !== undefined) child.stdin.end(input);
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

/**
 * Codex's flags: a provider of its config (`model_providers.gateway`), or with `builtIn` its
 * built-in OpenAI provider pointed at the gateway (`openai_base_url`), as a user of Codex with an
 * OpenAI-compatible endpoint may configure it.
 */
function codexArgs(gatewayUrl, model, { builtIn = false, extra = [] } = {}) {
  const provider = builtIn
    ? ["-c", `openai_base_url="${gatewayUrl}/v1"`]
    : [
        "-c",
        `model_providers.gateway={ name = "gateway", base_url = "${gatewayUrl}/v1", env_key = "GATEWAY_KEY", wire_api = "responses" }`,
        "-c",
        "model_provider=gateway",
      ];
  return [
    "--skip-git-repo-check",
    "--dangerously-bypass-approvals-and-sandbox",
    ...provider,
    "-c",
    'otel.exporter="none"',
    "-c",
    "analytics.enabled=false",
    ...extra,
    "-m",
    model,
  ];
}

/** Codex's built-in OpenAI provider reads its key from its login, not from the environment. */
function codexLogin(bin, env, work) {
  return run(join(bin, "codex"), ["login", "--with-api-key"], {
    cwd: work,
    env,
    input: `${KEY}\n`,
  });
}

function codexCase(bin, gatewayUrl, model, { builtIn = false } = {}) {
  return async (home, work) => {
    const env = { ...agentEnv(home), GATEWAY_KEY: KEY };
    if (builtIn) {
      const login = await codexLogin(bin, env, work);
      if (login.code !== 0) return login;
    }
    return run(
      join(bin, "codex"),
      [
        "exec",
        ...codexArgs(gatewayUrl, model, { builtIn }),
        "Create the marker file using your shell tool.",
      ],
      { cwd: work, env },
    );
  };
}

// ---- compaction ---------------------------------------------------------------------------

/** Codex compacts before a turn once the last one used this many tokens (its instructions pass it). */
const COMPACT_LIMIT = 3000;

/** Runs in order until one fails; the last result (its own output `lastOut`), with every run's output. */
async function inTurn(steps) {
  let out = "";
  let last = { code: 0, signal: null, out: "" };
  for (const step of steps) {
    last = await step();
    out += `${last.out}\n`;
    if (last.code !== 0) break;
  }
  return { ...last, out, lastOut: last.out };
}

/** Codex, two turns of one session, the second compacted first (auto-compaction past the limit). */
function codexCompactCase(bin, gatewayUrl, model, { builtIn = false } = {}) {
  return async (home, work) => {
    const env = { ...agentEnv(home), GATEWAY_KEY: KEY };
    const args = codexArgs(gatewayUrl, model, {
      builtIn,
      extra: ["-c", `model_auto_compact_token_limit=${COMPACT_LIMIT}`],
    });
    const codex = (more) => () =>
      run(join(bin, "codex"), ["exec", ...args, ...more], { cwd: work, env });
    return inTurn([
      ...(builtIn ? [() => codexLogin(bin, env, work)] : []),
      codex(["First question: what is this folder for?"]),
      codex(["resume", "--last", "Second question: and what comes next?"]),
    ]);
  };
}

/** Claude Code, a turn, `/compact` in the same session, then the next turn. */
function claudeCompactCase(bin, gatewayUrl, model) {
  return (home, work) => {
    const env = { ...agentEnv(home), ANTHROPIC_BASE_URL: gatewayUrl, ANTHROPIC_API_KEY: KEY };
    const claude =
      (prompt, more = []) =>
      () =>
        run(
          join(bin, "claude"),
          ["-p", prompt, ...more, "--model", model, "--output-format", "json"],
          { cwd: work, env },
        );
    return inTurn([
      claude("First question: what is this folder for?"),
      claude("/compact", ["--continue"]),
      claude("Second question: and what comes next?", ["--continue"]),
    ]);
  };
}

/** The account's balance in millionths of a rupiah, once nothing is held (at most 10 s). */
async function settledBalance(gatewayUrl) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const res = await fetch(`${gatewayUrl}/v1/account/quota`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    const quota = await res.json();
    if (quota.held_idr === 0 || Date.now() > deadline) return Math.round(quota.balance_idr * 1e6);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** What the gateway logged and charged since `before` (a case's start). */
async function sinceCase(gw, before) {
  const rows = (await gw.listRequests({ limit: 100 })).filter((r) => !before.ids.has(r.id));
  const debit = before.balance - (await settledBalance(gw.url));
  const charged = rows.reduce((sum, r) => sum + r.cost_micro, 0);
  return { rows, debit, charged };
}

/** The input items of a logged request's body, as the client sent them (captured parsed). */
function receivedInput(row) {
  const input = row.received?.input;
  return Array.isArray(input) ? input : [];
}

/**
 * A compaction case passes when every run exited 0, the session was compacted and the next turn
 * answered, every request the gateway logged was served and the balance went down by exactly what
 * those rows cost. `remote`: Codex's OpenAI provider, which compacts with a `compaction_trigger`
 * and sends the `compaction` item back. `upstream`: the wire of the fake behind the model, whose
 * last request (the next turn) must hold the summary and, from Codex, its instructions.
 */
function compactionCheck(gw, { agent, answered, remote = false, upstream }) {
  return async (ran, before) => {
    const { rows, debit, charged } = await sinceCase(gw, before);
    const failures = [];
    if (agent === "codex" && !ran.out.includes("context compacted"))
      failures.push("Codex did not report the context compacted");
    if (agent === "claude" && summaries.length === 0)
      failures.push("Claude Code asked for no summary");
    if (!(ran.lastOut ?? "").includes(answered))
      failures.push(`the next turn was not answered ${answered}`);
    const unserved = rows.filter((r) => r.status !== 200);
    if (unserved.length > 0)
      failures.push(
        `not served: ${unserved.map((r) => `${r.endpoint} ${r.status} ${r.error_code}`).join(", ")}`,
      );
    if (rows.length < 3) failures.push(`${rows.length} requests logged, not 3 or more`);
    if (charged <= 0 || debit !== charged)
      failures.push(`charged ${charged} micro-IDR over the rows, the balance went down ${debit}`);
    if (agent === "codex") {
      const triggered = rows.some((r) => receivedInput(r).at(-1)?.type === "compaction_trigger");
      const sentBack = rows.some((r) => receivedInput(r).some((i) => i.type === "compaction"));
      if (remote && !(triggered && sentBack))
        failures.push(
          `compaction_trigger sent: ${triggered}, compaction item sent back: ${sentBack}`,
        );
      if (!remote && triggered) failures.push("a compaction_trigger from a provider of its config");
    }
    if (upstream) {
      const last = seen.filter((r) => r.path === upstream).at(-1)?.body ?? {};
      const sent = JSON.stringify(last);
      if (!summaries.some((summary) => sent.includes(summary)))
        failures.push("the turn after the compaction was sent no summary");
      if (agent === "codex" && (last.messages ?? [])[0]?.role !== "system")
        failures.push("the turn after the compaction lost Codex's instructions");
    }
    return {
      ok: failures.length === 0,
      detail: `${failures.join("; ") || "ok"} (${rows.length} requests: ${rows
        .map((r) => `${r.endpoint} ${r.status}`)
        .reverse()
        .join(", ")})`,
    };
  };
}

// ---- main ---------------------------------------------------------------------------------

/** Priced, so that a compaction case sees each request charged, once. */
const prices = { price_input_per_mtok: 1000, price_output_per_mtok: 4000 };

async function main() {
  const bin = await installClis();
  const providerUrl = await startFakeProvider();
  const gw = await startGateway({
    db: join(root, "gateway.db"),
    port: 0,
    // The compaction cases read what Codex sent (a compaction_trigger, the item sent back).
    captureBodies: true,
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
        {
          name: "claude-sonnet-4-5",
          provider: "fake-anthropic",
          max_output_tokens: 64_000,
          ...prices,
        },
        // An alias Claude Code does not know, of an older model that refuses system messages.
        {
          name: "claude-older",
          provider: "fake-anthropic",
          upstream_model: "claude-3-5-haiku-20241022",
          max_output_tokens: 64_000,
        },
        {
          name: "claude-via-openai",
          provider: "fake-openai",
          max_output_tokens: 64_000,
          ...prices,
        },
        { name: "gpt-5-codex", provider: "fake-openai-responses", max_output_tokens: 64_000 },
        { name: "gpt-via-anthropic", provider: "fake-anthropic", max_output_tokens: 64_000 },
        { name: "gpt-via-chat", provider: "fake-openai", max_output_tokens: 64_000, ...prices },
        { name: "mock-gpt", provider: "mock", max_output_tokens: 64_000, ...prices },
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
    // Codex's built-in OpenAI provider: its Responses WebSocket refused with a 426, then HTTP.
    ["codex-openai", codexCase(bin, gw.url, "gpt-5-codex", { builtIn: true })],
    // Compaction: Codex's own (a provider of its config) and OpenAI's (its OpenAI provider), on
    // the mock and on a model bridged to chat completions; Claude Code's /compact on both wires.
    [
      "codex-compact-mock",
      codexCompactCase(bin, gw.url, "mock-gpt"),
      compactionCheck(gw, { agent: "codex", answered: "Mock reply to: Second question" }),
      "text",
    ],
    [
      "codex-compact-bridge",
      codexCompactCase(bin, gw.url, "gpt-via-chat"),
      compactionCheck(gw, {
        agent: "codex",
        answered: "ANSWER-",
        upstream: "/v1/chat/completions",
      }),
      "text",
    ],
    [
      "codex-remote-compact-mock",
      codexCompactCase(bin, gw.url, "mock-gpt", { builtIn: true }),
      compactionCheck(gw, {
        agent: "codex",
        answered: "Mock reply to: Second question",
        remote: true,
      }),
      "text",
    ],
    [
      "codex-remote-compact-bridge",
      codexCompactCase(bin, gw.url, "gpt-via-chat", { builtIn: true }),
      compactionCheck(gw, {
        agent: "codex",
        answered: "ANSWER-",
        remote: true,
        upstream: "/v1/chat/completions",
      }),
      "text",
    ],
    [
      "claude-compact",
      claudeCompactCase(bin, gw.url, "claude-sonnet-4-5"),
      compactionCheck(gw, { agent: "claude", answered: "ANSWER-", upstream: "/v1/messages" }),
      "text",
    ],
    [
      "claude-compact-cross",
      claudeCompactCase(bin, gw.url, "claude-via-openai"),
      compactionCheck(gw, {
        agent: "claude",
        answered: "ANSWER-",
        upstream: "/v1/chat/completions",
      }),
      "text",
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
    summaries.length = 0;
    refused = 0;
    const before = {
      ids: new Set((await gw.listRequests({ limit: 100 })).map((r) => r.id)),
      balance: await settledBalance(gw.url),
    };
    const began = Date.now();
    const ran = await start(home, work);
    const checked = check ? await check(ran, before) : markerWritten(work);
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
