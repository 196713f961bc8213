/** Module hooks (`register.mjs` installs them): the keyring binding is the fake beside this file. */
export async function resolve(specifier, context, next) {
  if (specifier === "@napi-rs/keyring")
    return { url: new URL("./binding.mjs", import.meta.url).href, shortCircuit: true };
  return next(specifier, context);
}
