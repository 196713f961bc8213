import { Command, CommanderError, type ErrorOptions, type HelpContext } from "commander";
import { cliCommand } from "../cli-command.js";
import { packageVersion } from "../version.js";
import { UsageError, UserError, usageExitCode } from "./errors.js";

/**
 * Commander shows a group run without its subcommand (`gateway`, `gateway keys`) its help as an
 * error: on stderr, exit code 1, past the usage line's rewrite. Asking for the list of commands
 * is no mistake, so it gets what `--help` gets (gh does the same).
 */
class CommandGroup extends Command {
  override createCommand(name?: string): Command {
    return new CommandGroup(name);
  }

  // Only a group without its subcommand asks for help as an error.
  override help(context?: HelpContext): never;
  override help(cb: (text: string) => string): never;
  override help(context?: HelpContext | ((text: string) => string)): never {
    if (typeof context === "function") return super.help(context);
    return super.help({ ...context, error: false });
  }

  /**
   * Commander suggests only a group's own options (`--help`, `--version`), so `gateway --prot`
   * got no hint: an option one of its commands takes (`serve --port`) is named with its command.
   */
  override error(message: string, options?: ErrorOptions): never {
    const flag = /^error: unknown option '([^']+)'$/.exec(message)?.[1];
    const hint = flag && this.commands.length > 0 ? optionOfACommand(this, flag) : undefined;
    return super.error(hint ? `${message}\n(Did you mean ${hint}?)` : message, options);
  }
}

/**
 * The commands under `group` that take `typed` (`--prot`, or `--lable=x`), or the options closest
 * to it by Commander's own measure, as a hint: "`gateway serve --port`" when one command takes
 * it, "--profile after one of login, logout, ..." when several do.
 */
function optionOfACommand(group: Command, typed: string): string | undefined {
  const takers = new Map<string, string[]>();
  const walk = (command: Command, path: string[]) => {
    for (const sub of command.commands) {
      const at = [...path, sub.name()];
      for (const option of sub.options) {
        if (option.hidden) continue;
        for (const flag of [option.long, option.short]) {
          if (flag) takers.set(flag, [...(takers.get(flag) ?? []), at.join(" ")]);
        }
      }
      walk(sub, at);
    }
  };
  walk(group, group.parent ? [group.name()] : []);
  const name = typed.split("=")[0];
  const flags = takers.has(name) ? [name] : closestLongFlags(name, [...takers.keys()]);
  if (flags.length === 0) return undefined;
  return flags
    .map((flag) => {
      const commands = takers.get(flag) ?? [];
      return commands.length === 1
        ? `\`${cliCommand(`${commands[0]} ${flag}`)}\``
        : `${flag} after one of ${commands.join(", ")}`;
    })
    .join(" or ");
}

/**
 * The long flags among `candidates` closest to `typed`, as Commander suggests them (it exports
 * no measure of its own): asked of a command that takes only them.
 */
function closestLongFlags(typed: string, candidates: string[]): string[] {
  if (!typed.startsWith("--")) return [];
  const probe = new Command()
    .exitOverride()
    .helpOption(false)
    .showSuggestionAfterError(true)
    .configureOutput({ outputError: () => {} });
  for (const flag of candidates) if (flag.startsWith("--")) probe.option(flag);
  try {
    probe.parse([typed], { from: "user" });
  } catch (err) {
    const named = /\(Did you mean (?:one of )?(.+)\?\)$/.exec((err as Error).message)?.[1];
    if (named) return named.split(", ");
  }
  return [];
}

export async function main(argv: string[]): Promise<void> {
  const program = new CommandGroup()
    .name("gateway")
    .description("Model Gateway: one kn- key for every model, on your machine")
    .version(packageVersion)
    // A newcomer's first command, which the list of commands alone does not say.
    .addHelpText(
      "after",
      "\nStart here:\n  $ gateway serve    a demo setup in ./gateway.db, answered offline by a mock provider; it prints a key\n\nEach command's options are in its own --help, and all of them in docs/cli.md",
    )
    .exitOverride()
    // One line and the closest name, not the whole help: `error: unknown option '--prot'` and
    // `(Did you mean --port?)` become `gateway: unknown option '--prot' (did you mean --port?)`.
    .showSuggestionAfterError(true)
    .configureOutput({
      outputError: (text, write) => write(commanderLine(text)),
      // Help's usage line and examples as this user runs the CLI (`npx gateway ...` in a clone).
      writeOut: (text) => process.stdout.write(asRunHere(text)),
    });
  try {
    // Only the command being run is loaded (each command's module brings its own: the API
    // client, zod, the credential stores...): every start, `serve`'s first of all, pays for one.
    // Anything else (help, a version, a mistyped name) loads them all, in the help's order.
    const named = argv[2];
    const wanted =
      named !== undefined && Object.hasOwn(commands, named) ? [named] : Object.keys(commands);
    const registers = await Promise.all(wanted.map((name) => commands[name]()));
    for (const register of registers) register(program);
    const args = argv.slice(2);
    versionMistake(args[0]);
    await program.parseAsync([...argv.slice(0, 2), ...helpAsFlag(program, args)]);
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

/** Each top-level command: its module, loaded, gives what adds it to the program. */
const commands: Record<string, () => Promise<(program: Command) => void>> = {
  serve: async () => (await import("./serve.js")).registerServe,
  login: async () => (await import("./login.js")).registerLogin,
  logout: async () => (await import("./logout.js")).registerLogout,
  whoami: async () => (await import("./whoami.js")).registerWhoami,
  "owner-link": async () => (await import("./owner-link.js")).registerOwnerLink,
  dashboard: async () => (await import("./dashboard.js")).registerDashboard,
  mcp: async () => (await import("./mcp.js")).registerMcp,
  keys: async () => {
    const [create, list, revoke] = await Promise.all([
      import("./keys/create.js"),
      import("./keys/list.js"),
      import("./keys/revoke.js"),
    ]);
    return (program) => {
      const keys = program
        .command("keys")
        .description(
          "Create, list and revoke per-tool keys (after `gateway login`; `keys create --db` needs none)",
        )
        .addHelpText(
          "after",
          "\nExamples:\n  $ gateway keys create --label ci\n  $ gateway keys list\n  $ gateway keys revoke ci\n  $ gateway keys create --db gateway.db --label app",
        );
      create.registerKeysCreate(keys);
      list.registerKeysList(keys);
      revoke.registerKeysRevoke(keys);
    };
  },
  secrets: async () => {
    const { registerSecretsRotate } = await import("./secrets/rotate.js");
    return (program) => {
      const secrets = program
        .command("secrets")
        .description("Manage the key that encrypts BYOK credentials at rest")
        .addHelpText("after", "\nExamples:\n  $ gateway secrets rotate --db gateway.db");
      registerSecretsRotate(secrets);
    };
  },
};

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

/** The command `name` names in `group`, by its name or an alias. */
function subcommand(group: Command, name: string | undefined): Command | undefined {
  return name === undefined
    ? undefined
    : group.commands.find((c) => c.name() === name || c.aliases().includes(name));
}

/**
 * `help` takes a command's whole path (`gateway help keys create`, as gh does), where Commander
 * reads one word and answers a name it does not know with its group's help and exit code 0. As
 * the command's `--help`; a name no command has goes to Commander as typed, which refuses it with
 * the closest name (exit code 2).
 */
function helpAsFlag(program: Command, args: string[]): string[] {
  let group = program;
  let at = 0;
  for (let sub = subcommand(group, args[at]); sub; sub = subcommand(group, args[at])) {
    group = sub;
    at++;
  }
  if (args[at] !== "help" || group.commands.length === 0) return args;
  const path = args.slice(0, at);
  let target = group;
  for (const word of args.slice(at + 1)) {
    // Past a command without subcommands the words would be its arguments: never run it.
    if (target.commands.length === 0) break;
    path.push(word);
    const sub = subcommand(target, word);
    if (!sub) return path;
    target = sub;
  }
  return [...path, "--help"];
}

/** `-v` and `version` print the version in other CLIs: refused here with the flag that does. */
function versionMistake(first: string | undefined): void {
  if (first === "-v" || first === "version")
    throw new UsageError(
      `unknown ${first === "-v" ? "option" : "command"} '${first}' (did you mean --version?)`,
    );
}

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
  // An example's command may follow environment assignments (`$ GATEWAY_SECRET_KEY=... gateway`).
  return help
    .replace(/^Usage: gateway\b/gm, `Usage: ${prefix}`)
    .replace(/^ *\$ .*$/gm, (example) => example.replace(/(?<=[\s(])gateway(?= |$)/g, prefix));
}
