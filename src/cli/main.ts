import { Command, CommanderError } from "commander";
import { cliCommand } from "../cli-command.js";
import { packageVersion } from "../version.js";
import { registerDashboard } from "./dashboard.js";
import { UserError, usageExitCode } from "./errors.js";
import { registerKeysCreate } from "./keys/create.js";
import { registerKeysList } from "./keys/list.js";
import { registerKeysRevoke } from "./keys/revoke.js";
import { registerLogin } from "./login.js";
import { registerLogout } from "./logout.js";
import { registerMcp } from "./mcp.js";
import { registerOwnerLink } from "./owner-link.js";
import { registerSecretsRotate } from "./secrets/rotate.js";
import { registerServe } from "./serve.js";
import { registerWhoami } from "./whoami.js";

export async function main(argv: string[]): Promise<void> {
  const program = new Command()
    .name("gateway")
    .description("Model Gateway: one kn- key for every model, on your machine")
    .version(packageVersion)
    .exitOverride()
    // One line and the closest name, not the whole help: `error: unknown option '--prot'` and
    // `(Did you mean --port?)` become `gateway: unknown option '--prot' (did you mean --port?)`.
    .showSuggestionAfterError(true)
    .configureOutput({
      outputError: (text, write) => write(commanderLine(text)),
      // Help's usage line and examples as this user runs the CLI (`npx gateway ...` in a clone).
      writeOut: (text) => process.stdout.write(asRunHere(text)),
    });
  registerServe(program);
  registerLogin(program);
  registerLogout(program);
  registerWhoami(program);
  registerOwnerLink(program);
  registerDashboard(program);
  registerMcp(program);
  const keys = program
    .command("keys")
    .description("Create, list and revoke per-tool keys (needs `gateway login`)")
    .addHelpText(
      "after",
      "\nExamples:\n  $ gateway keys create --label ci\n  $ gateway keys list\n  $ gateway keys revoke ci",
    );
  registerKeysCreate(keys);
  registerKeysList(keys);
  registerKeysRevoke(keys);
  const secrets = program
    .command("secrets")
    .description("Manage the key that encrypts BYOK credentials at rest")
    .addHelpText("after", "\nExamples:\n  $ gateway secrets rotate --db gateway.db");
  registerSecretsRotate(secrets);
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError)
      process.exit(usageErrors.has(err.code) ? usageExitCode : err.exitCode);
    if (err instanceof UserError) {
      process.stderr.write(`gateway: ${err.message}\n`);
      process.exit(err.exitCode);
    }
    process.stderr.write(
      `gateway: unexpected error: ${(err as Error).message}\nPlease report this with the command you ran.\n`,
    );
    process.exit(70);
  }
}

/** Commander's refusals of a command line (not help or version, which exit 0). */
const usageErrors = new Set([
  "commander.unknownCommand",
  "commander.unknownOption",
  "commander.excessArguments",
  "commander.missingArgument",
  "commander.optionMissingArgument",
  "commander.missingMandatoryOptionValue",
  "commander.invalidArgument",
  "commander.conflictingOption",
]);

function commanderLine(text: string): string {
  const line = text
    .trim()
    .replace(/^error: /, "")
    .replace(/\s*\n?\(Did you mean (.+)\?\)$/, " (did you mean $1?)")
    .replace(/\n+/g, " ");
  return `gateway: ${line}\n`;
}

function asRunHere(help: string): string {
  const prefix = cliCommand("").trimEnd();
  if (prefix === "gateway") return help;
  return help.replace(/(^Usage: |\$ |\$\()gateway\b/gm, `$1${prefix}`);
}
