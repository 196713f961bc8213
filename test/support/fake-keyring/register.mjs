import { register } from "node:module";

/** `node --import <this file>`: the process gets the fake keychain of `binding.mjs`. */
register("./hooks.mjs", import.meta.url);
