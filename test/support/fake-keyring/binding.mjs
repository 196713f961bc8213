import { existsSync, readFileSync, writeFileSync } from "node:fs";

/**
 * Stands in for @napi-rs/keyring in a child process (`hooks.mjs` resolves the package here): an
 * OS keychain kept in the JSON file FAKE_KEYRING_FILE, which records every call made to it, so a
 * test sees whether a process touched the keychain at all, on any machine. With
 * FAKE_KEYRING_UNAVAILABLE set, every call fails with that text, as on a machine without one.
 */

const file = process.env.FAKE_KEYRING_FILE;

function load() {
  if (!file) throw new Error("FAKE_KEYRING_FILE is not set");
  return existsSync(file) ? JSON.parse(readFileSync(file, "utf8")) : { entries: {}, calls: [] };
}

function call(op, service, account, change) {
  const state = load();
  state.calls.push(`${op} ${service} ${account}`);
  const unavailable = process.env.FAKE_KEYRING_UNAVAILABLE;
  const result = unavailable ? undefined : change(state.entries, `${service}/${account}`);
  writeFileSync(file, JSON.stringify(state));
  if (unavailable) throw new Error(unavailable);
  return result;
}

export class AsyncEntry {
  constructor(service, account) {
    this.service = service;
    this.account = account;
  }

  async getPassword() {
    return call("get", this.service, this.account, (entries, id) => entries[id] ?? null);
  }

  async setPassword(password) {
    call("set", this.service, this.account, (entries, id) => {
      entries[id] = password;
    });
  }

  async deletePassword() {
    return call("delete", this.service, this.account, (entries, id) => {
      const had = id in entries;
      delete entries[id];
      return had;
    });
  }
}
