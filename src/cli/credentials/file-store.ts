import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { cliCommand } from "../../cli-command.js";
import { makePrivateDir, writePrivateFile } from "../../store/private-files.js";
import { describeSystemError } from "../../system-errors.js";
import { UserError } from "../errors.js";
import type { CredentialsFile } from "./file-schema.js";
import type { CredentialStore, StoredLogin } from "./types.js";

/**
 * The fallback where no OS keychain works (headless Linux, CI): one JSON file keyed by profile,
 * in a directory only the user can enter (0700), readable only by the user (0600).
 */

/** $XDG_CONFIG_HOME/model-gateway/credentials.json, else ~/.config/model-gateway/credentials.json. */
function credentialsFilePath(env: NodeJS.ProcessEnv = process.env): string {
  const configHome = env.XDG_CONFIG_HOME || join(homedir(), ".config");
  return join(configHome, "model-gateway", "credentials.json");
}

/** The path as a person would type it: ~ for the home directory. */
function displayPath(path: string): string {
  const home = homedir();
  return home && path.startsWith(`${home}/`) ? `~${path.slice(home.length)}` : path;
}

export class FileCredentialStore implements CredentialStore {
  readonly kind = "file";

  constructor(readonly path = credentialsFilePath()) {}

  get location(): string {
    return displayPath(this.path);
  }

  // Own entries only: a profile named after an object's property (`constructor`) is not stored.
  async get(profile: string): Promise<StoredLogin | undefined> {
    const { profiles } = await this.read();
    return Object.hasOwn(profiles, profile) ? profiles[profile] : undefined;
  }

  async set(profile: string, login: StoredLogin): Promise<void> {
    const file = await this.read();
    file.profiles[profile] = login;
    this.write(file);
  }

  async delete(profile: string): Promise<boolean> {
    const file = await this.read();
    if (!Object.hasOwn(file.profiles, profile)) return false;
    delete file.profiles[profile];
    this.write(file);
    return true;
  }

  private async read(): Promise<CredentialsFile> {
    let text: string;
    try {
      text = readFileSync(this.path, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return { version: 1, profiles: {} };
      throw new UserError(`cannot read ${this.location}: ${describeSystemError(err)}`);
    }
    const { credentialsFile } = await import("./file-schema.js");
    try {
      return credentialsFile.parse(JSON.parse(text));
    } catch {
      throw new UserError(
        `${this.location} is damaged; delete it and run \`${cliCommand("login")}\` again`,
      );
    }
  }

  /** Written to a private temp file and renamed, so a crash never leaves half a file. */
  private write(file: CredentialsFile): void {
    try {
      makePrivateDir(dirname(this.path));
      writePrivateFile(this.path, `${JSON.stringify(file, null, 2)}\n`);
    } catch (err) {
      throw new UserError(`cannot write ${this.location}: ${describeSystemError(err)}`);
    }
  }
}
