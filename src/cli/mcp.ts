import type { Command } from "commander";
import { cliCommand } from "../cli-command.js";
import { shownText } from "../server/http/shown-text.js";
import { connectWithKey } from "./api-client.js";
import { defaultProfile, endingPromptly, profileFlag } from "./credentials/index.js";
import { UsageError } from "./errors.js";
import { note, paintFor, printJson, result } from "./output.js";

/**
 * `gateway mcp`: the ready command or config snippet that adds this gateway's MCP server to a
 * coding agent, each with a per-tool key minted for that agent (labelled after it, so it can be
 * told apart and revoked alone). It prints; it writes no agent's config, which stays the user's
 * to place. The login key itself is never printed.
 */

/** The server's name in each agent's config. */
const serverName = "model-gateway";

interface AgentClient {
  id: string;
  name: string;
  /** Where the snippet goes, in words. */
  where: string;
  snippet(url: string, key: string): string;
}

const json = (value: unknown) => JSON.stringify(value, null, 2);

const agentClients: readonly AgentClient[] = [
  {
    id: "claude-code",
    name: "Claude Code",
    where: "run in a terminal (add --scope user to have it in every project)",
    snippet: (url, key) =>
      `claude mcp add --transport http ${serverName} ${url} --header "Authorization: Bearer ${key}"`,
  },
  {
    id: "codex",
    name: "Codex",
    where: "add to ~/.codex/config.toml",
    snippet: (url, key) =>
      [
        `[mcp_servers.${serverName}]`,
        `url = "${url}"`,
        `http_headers = { "Authorization" = "Bearer ${key}" }`,
      ].join("\n"),
  },
  {
    id: "cursor",
    name: "Cursor",
    where: "merge into ~/.cursor/mcp.json (or .cursor/mcp.json in a project)",
    snippet: (url, key) =>
      json({ mcpServers: { [serverName]: { url, headers: { Authorization: `Bearer ${key}` } } } }),
  },
  {
    id: "vscode",
    name: "VS Code",
    where: "merge into .vscode/mcp.json (keep it out of version control: it holds the key)",
    snippet: (url, key) =>
      json({
        servers: {
          [serverName]: { type: "http", url, headers: { Authorization: `Bearer ${key}` } },
        },
      }),
  },
];

interface McpFlags {
  baseUrl?: string;
  profile: string;
  json?: boolean;
}

export function registerMcp(program: Command): void {
  const ids = agentClients.map((client) => client.id);
  program
    .command("mcp")
    .description("Print how to add this gateway's MCP server to a coding agent, with a key for it")
    .argument("[clients...]", `which agents: ${ids.join(", ")} (default: all of them)`)
    .option("--base-url <url>", "gateway to use (default: the one logged in to)")
    .option("--profile <name>", "login profile to use", profileFlag, defaultProfile)
    .option("--json", "print [{client, key_id, label, url, snippet}] as JSON")
    .addHelpText(
      "after",
      `
Each agent gets its own per-tool key, labelled "<agent>-mcp" (see \`gateway keys list\`); the
command only prints, it writes no agent's config.

Examples:
  $ gateway mcp claude-code
  $ gateway mcp cursor vscode
  $ gateway mcp --base-url https://gateway.example.com`,
    )
    .action(
      endingPromptly(async (wanted: string[], flags: McpFlags) => {
        const unknown = wanted.filter((id) => !ids.includes(id));
        if (unknown.length > 0) {
          throw new UsageError(`unknown agent "${unknown[0]}"; choose from ${ids.join(", ")}`);
        }
        const chosen = agentClients.filter(
          (client) => wanted.length === 0 || wanted.includes(client.id),
        );
        const { client } = await connectWithKey(flags);
        const url = `${client.baseUrl}/mcp`;
        const printed = [];
        for (const agent of chosen) {
          const created = await client.createKey(`${agent.id}-mcp`, false);
          printed.push({
            client: agent.id,
            name: agent.name,
            where: agent.where,
            key_id: created.id,
            label: created.label,
            url,
            snippet: agent.snippet(url, created.key),
          });
        }
        if (flags.json) {
          printJson(
            printed.map(({ client, key_id, label, url, snippet }) => ({
              client,
              key_id,
              label,
              url,
              snippet,
            })),
          );
          return;
        }
        const paint = paintFor(process.stdout);
        // The id and label as the server echoed them: shown as one line with no escape sequence.
        note(
          `${printed.length === 1 ? "A key was" : `${printed.length} keys were`} created for ${url}, shown only here: ${printed.map((p) => `${shownText(p.key_id)} "${shownText(p.label)}"`).join(", ")}. Revoke one with \`${cliCommand("keys revoke <label>")}\`.`,
        );
        result(
          printed.map((p) => `${paint.bold(`${p.name}`)}: ${p.where}\n\n${p.snippet}\n`).join("\n"),
        );
      }),
    );
}
