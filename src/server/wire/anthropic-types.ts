/**
 * Anthropic Messages wire shapes, as far as the gateway reads or writes them.
 * Permissive on purpose: new block types and fields appear often and must not break us.
 */

export type Extra = { [key: string]: unknown };

export type AnthropicTextBlock = { type: "text"; text: string } & Extra;
export type AnthropicImageSource =
  | { type: "base64"; media_type: string; data: string }
  | { type: "url"; url: string }
  | ({ type: string } & Extra);
export type AnthropicImageBlock = { type: "image"; source: AnthropicImageSource } & Extra;
export type AnthropicDocumentBlock = { type: "document"; source: AnthropicImageSource } & Extra;
export type AnthropicToolUseBlock = {
  type: "tool_use";
  id: string;
  name: string;
  input: unknown;
} & Extra;
export type AnthropicToolResultBlock = {
  type: "tool_result";
  tool_use_id: string;
  content?: string | AnthropicContentBlock[];
  is_error?: boolean;
} & Extra;
export type AnthropicThinkingBlock = {
  type: "thinking";
  thinking: string;
  signature?: string;
} & Extra;
export type AnthropicContentBlock =
  | AnthropicTextBlock
  | AnthropicImageBlock
  | AnthropicDocumentBlock
  | AnthropicToolUseBlock
  | AnthropicToolResultBlock
  | AnthropicThinkingBlock
  | ({ type: string } & Extra);

/** `system` inside `messages` is beta `mid-conversation-system-2026-04-07` (text content only). */
export type AnthropicMessageParam = {
  role: "user" | "assistant" | "system";
  content: string | AnthropicContentBlock[];
} & Extra;

export type AnthropicTool = {
  name: string;
  description?: string;
  input_schema?: { [key: string]: unknown };
  type?: string;
} & Extra;

export type AnthropicToolChoice =
  | { type: "auto"; disable_parallel_tool_use?: boolean }
  | { type: "any"; disable_parallel_tool_use?: boolean }
  | { type: "tool"; name: string; disable_parallel_tool_use?: boolean }
  | { type: "none" };

export type MessagesRequest = {
  model: string;
  messages: AnthropicMessageParam[];
  max_tokens: number;
  system?: string | AnthropicTextBlock[];
  temperature?: number;
  top_p?: number;
  top_k?: number;
  stop_sequences?: string[];
  stream?: boolean;
  tools?: AnthropicTool[];
  tool_choice?: AnthropicToolChoice;
  metadata?: { user_id?: string | null } & Extra;
  service_tier?: "auto" | "standard_only";
  thinking?: Extra;
  output_config?: { format?: { type: "json_schema"; schema: Extra } | null } & Extra;
} & Extra;

export type AnthropicStopReason =
  | "end_turn"
  | "max_tokens"
  | "stop_sequence"
  | "tool_use"
  | "pause_turn"
  | "refusal"
  | "model_context_window_exceeded";

export type AnthropicUsage = {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
} & Extra;

export type MessagesResponse = {
  id: string;
  type: "message";
  role: "assistant";
  model: string;
  content: AnthropicContentBlock[];
  stop_reason: AnthropicStopReason | null;
  stop_sequence: string | null;
  usage: AnthropicUsage;
} & Extra;

export type MessageStartEvent = { type: "message_start"; message: MessagesResponse };
export type ContentBlockStartEvent = {
  type: "content_block_start";
  index: number;
  content_block: AnthropicContentBlock;
};
export type ContentBlockDelta =
  | { type: "text_delta"; text: string }
  | { type: "input_json_delta"; partial_json: string }
  | { type: "thinking_delta"; thinking: string }
  | { type: "signature_delta"; signature: string }
  | ({ type: string } & Extra);
export type ContentBlockDeltaEvent = {
  type: "content_block_delta";
  index: number;
  delta: ContentBlockDelta;
};
export type ContentBlockStopEvent = { type: "content_block_stop"; index: number };
export type MessageDeltaEvent = {
  type: "message_delta";
  delta: { stop_reason: AnthropicStopReason | null; stop_sequence: string | null } & Extra;
  usage: { output_tokens: number } & Partial<AnthropicUsage>;
};
export type MessageStopEvent = { type: "message_stop" };
export type PingEvent = { type: "ping" };
export type AnthropicErrorEvent = { type: "error"; error: { type: string; message: string } };
export type MessagesStreamEvent =
  | MessageStartEvent
  | ContentBlockStartEvent
  | ContentBlockDeltaEvent
  | ContentBlockStopEvent
  | MessageDeltaEvent
  | MessageStopEvent
  | PingEvent
  | AnthropicErrorEvent;

/** One SSE event as the Messages API frames it: the `event:` name equals `data.type`. */
export type MessagesSSEEvent = { event: MessagesStreamEvent["type"]; data: MessagesStreamEvent };
