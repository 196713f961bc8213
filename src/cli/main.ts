import { Command, CommanderError } from "commander";
import { UserError } from "./errors.js";
import { registerServe } from "./serve.js";

export async function main(argv: string[]): Promise<void> {
  const program = new Command()
    .name("gateway")
    .description("Model Gateway: one kn- key for every model, on your machine")
    .version("0.1.0")
    .exitOverride()
    .showHelpAfterError();
  registerServe(program);
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) process.exit(err.exitCode);
    if (err instanceof UserError) {
      process.stderr.write(`gateway: ${err.message}\n`);
      process.exit(err.exitCode);
    }
    process.stderr.write(`gateway: unexpected error: ${(err as Error).message}\nPlease report this with the command you ran.\n`);
    process.exit(70);
  }
}
