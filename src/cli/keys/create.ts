import type { Command } from "commander";
import { connectWithKey } from "../api-client.js";
import { defaultProfile, endingPromptly } from "../credentials/index.js";
import { note, paintFor, printJson, result } from "../output.js";

/**
 * `gateway keys create`: mint a per-tool key from the login key. The key goes to stdout alone
 * (the explanation to stderr), so `KEY=$(gateway keys create --label ci)` just works.
 */

interface CreateFlags {
  label: string;
  shared?: boolean;
  json?: boolean;
  baseUrl?: string;
  profile: string;
}

export function registerKeysCreate(keys: Command): void {
  keys
    .command("create")
    .description("Create a per-tool key; it is shown once, now")
    .requiredOption("--label <name>", "what the key is for (one key per tool or app)")
    .option("--shared", "a key to hand to other people (limited per IP, no quota reads)")
    .option("--json", "print {id, key, label, kind, created_at} as JSON")
    .option("--base-url <url>", "gateway to use (default: the one logged in to)")
    .option("--profile <name>", "login profile to use", defaultProfile)
    .addHelpText(
      "after",
      `
Examples:
  $ gateway keys create --label ci
  $ export OPENAI_API_KEY="$(gateway keys create --label my-app)"
  $ gateway keys create --label demo-for-team --shared --json`,
    )
    .action(
      endingPromptly(async (flags: CreateFlags) => {
        const { client } = await connectWithKey(flags);
        const created = await client.createKey(flags.label, flags.shared ?? false);
        if (flags.json) {
          printJson(created);
          return;
        }
        const err = paintFor(process.stderr);
        note(
          `Created ${created.kind} key ${created.id} "${created.label}". ${err.yellow("Copy it now: it is not shown again.")}`,
        );
        result(created.key);
      }),
    );
}
