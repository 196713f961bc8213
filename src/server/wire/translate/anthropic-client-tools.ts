import type { JsonObject } from "./shared.js";

/**
 * Anthropic-defined client tools (`bash_*`, `text_editor_*`): the client runs them, but their
 * schemas live on Anthropic's side, so a request declares only `{type, name}`. Toward another
 * provider they become function tools with the published schemas; the model's calls come back
 * under the same name, which the client's handler expects.
 */

const bashSchema: JsonObject = {
  type: "object",
  properties: {
    command: { type: "string", description: "The bash command to run." },
    restart: { type: "boolean", description: "Restart the bash session." },
  },
};

function textEditorSchema(withUndo: boolean): JsonObject {
  const commands = ["view", "create", "str_replace", "insert"];
  if (withUndo) commands.push("undo_edit");
  return {
    type: "object",
    properties: {
      command: { type: "string", enum: commands },
      path: { type: "string", description: "Absolute path to the file or directory." },
      file_text: { type: "string", description: "create: the new file's content." },
      old_str: { type: "string", description: "str_replace: the exact text to replace." },
      new_str: { type: "string", description: "str_replace and insert: the new text." },
      insert_line: { type: "integer", description: "insert: the line after which to insert." },
      view_range: {
        type: "array",
        items: { type: "integer" },
        minItems: 2,
        maxItems: 2,
        description: "view: first and last line to show (-1 for the end).",
      },
    },
    required: ["command", "path"],
  };
}

const descriptions = {
  bash: "Run a command in a persistent bash shell and return its output.",
  textEditor:
    "View, create and edit files: view (cat -n, or a directory listing), create, str_replace (old_str must match exactly once), insert (after insert_line).",
};

/** The function-tool form of an Anthropic-defined client tool, or undefined for any other type. */
export function anthropicClientTool(
  type: string,
): { description: string; parameters: JsonObject } | undefined {
  if (type.startsWith("bash_")) return { description: descriptions.bash, parameters: bashSchema };
  if (type.startsWith("text_editor_")) {
    // The 2025-07 editor dropped undo_edit; the earlier ones have it.
    const withUndo = type < "text_editor_20250429";
    return { description: descriptions.textEditor, parameters: textEditorSchema(withUndo) };
  }
  return undefined;
}
