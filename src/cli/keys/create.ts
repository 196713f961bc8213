import type { Command } from "commander";
import { shownText } from "../../server/http/shown-text.js";
import { shownKeyKind } from "../../store/key-rows.js";
import { type CreatedKey, connectWithKey } from "../api-client.js";
import { defaultProfile, endingPromptly, profileFlag } from "../credentials/index.js";
import { sqliteFileOnly, UsageError } from "../errors.js";
import { note, paintFor, printJson, result } from "../output.js";
import { createKeyInDatabase, labelFlag } from "./create-offline.js";

/**
 * `gateway keys create`: mint a per-tool key from the login key. The key goes to stdout alone
 * (the explanation to stderr), so `KEY=$(gateway keys create --label ci)` just works.
 */

interface CreateFlags {
  label?: string;
  db?: string;
  account?: string;
  shared?: boolean;
  json?: boolean;
  baseUrl?: string;
  profile: string;
}

export function registerKeysCreate(keys: Command): void {
  keys
    .command("create")
    .description("Create a per-tool key; it is shown once, now")
    .option("--label <name>", "what the key is for (one key per tool or app)")
    .option("--db <file>", "mint the key straight into this gateway database (no login needed)")
    .option("--account <id>", "with --db: the account (default: the gateway owner's)")
    .option("--shared", "a key to hand to other people (limited per IP, no quota reads)")
    .option("--json", "print {id, key, label, kind, parent_key_id, created_at} as JSON")
    .option("--base-url <url>", "gateway to use (default: the one logged in to)")
    .option("--profile <name>", "login profile to use", profileFlag, defaultProfile)
    .addHelpText(
      "after",
      `
Examples:
  $ gateway keys create --label ci
  $ export OPENAI_API_KEY="$(gateway keys create --label my-app)"
  $ gateway keys create --label demo-for-team --shared --json
  $ gateway keys create --db gateway.db --label my-app   # offline, from the database file`,
    )
    .action(
      endingPromptly(async (flags: CreateFlags) => {
        const shared = flags.shared ?? false;
        let created: CreatedKey;
        if (flags.db !== undefined) {
          sqliteFileOnly(
            flags.db,
            "on Postgres, create keys in the owner dashboard or with the admin API (POST /api/admin/accounts/{id}/keys)",
          );
          created = await createKeyInDatabase({
            db: flags.db,
            label: flags.label ?? "cli",
            account: flags.account,
            shared,
          });
        } else {
          if (flags.label === undefined)
            throw new UsageError("--label is required (what the key is for), e.g. --label ci");
          if (flags.account !== undefined)
            throw new UsageError(
              "--account needs --db: a login key mints keys for its own account",
            );
          const label = labelFlag(flags.label);
          const { client } = await connectWithKey(flags);
          created = await client.createKey(label, shared);
        }
        if (flags.json) {
          printJson(created);
          return;
        }
        const err = paintFor(process.stderr);
        // The label as the terminal shows it: one line, no escape sequence of its own.
        note(
          `Created ${shownText(shownKeyKind(created))} key ${shownText(created.id)} "${shownText(created.label)}". ${err.yellow("Copy it now: it is not shown again.")}`,
        );
        result(created.key);
      }),
    );
}
