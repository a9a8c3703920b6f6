// callgate console: pending calls and questions of every server of the fleet, live.
// The DOM is built with textContent only: nothing a server or an agent sends is ever parsed
// as HTML. Every state-changing request is a JSON POST with the session's CSRF token.
"use strict";

const state = {
  csrf: "",
  targets: [],          // [{name, address, status, detail}]
  status: new Map(),    // target name -> {status, detail}
  items: new Map(),     // key -> event (approval or question)
  cards: new Map(),     // key -> card element (kept, so a typed note survives re-renders)
  // batch key -> {ids, opened, changed}: the execution IDs its box shows. Calls join a box only
  // in its first SETTLE_MS (one model turn arrives as a burst); a call that joins the batch
  // later is shown as a card of its own. "Approve all" sends exactly `ids`, and is enabled only
  // once the box has not changed for SETTLE_MS, so no call is approved unseen.
  batchViews: new Map(),
  // The calls that stopped waiting while this page was open, newest first (RECENT at most):
  // {target, summary, state, decided_by, reason, time}.
  recent: [],
};

const RECENT = 20;

// A time as the approver reads it: local, with its zone ("14:02:31 CET").
function clock(value) {
  return new Date(value).toLocaleTimeString([], { timeZoneName: "short" });
}

const SETTLE_MS = 1000;
// Cards (or batch boxes) shown at first; "show more" adds as many again. A card is built only
// when it is first shown, and events are applied in bursts: one render per burst, however
// many events it holds, so a flood of pending calls stays usable.
const PAGE = 50;
const RENDER_DELAY_MS = 30;
const PREVIEW_LINES = 400;
state.limit = PAGE;
state.renderQueued = false;

function scheduleRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  setTimeout(() => { state.renderQueued = false; render(); }, RENDER_DELAY_MS);
}

function cardFor(event) {
  const id = event.type === "approval" ? event.call.execution_id : event.execution_id;
  const k = key(event.target, id);
  if (!state.cards.has(k)) {
    state.cards.set(k, event.type === "approval" ? approvalCard(event) : questionCard(event));
  }
  return state.cards.get(k);
}

// A batch is one session's turn: calls group only within one session and loop.
function batchKey(event) {
  if (event.type !== "approval" || !event.call.batch_id) return "";
  const call = event.call;
  return [event.target, call.session_id, call.loop_id, call.batch_id].join("\u0000");
}

const KIND_LABELS = [
  ["once", "Approve once", "approve"],
  ["session", "Approve for session", ""],
  ["always", "Approve always", ""],
];

function key(target, executionId) { return target + "\u0000" + executionId; }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
  }
  return node;
}

function notice(text, isError) {
  const node = document.getElementById("notice");
  node.textContent = text;
  node.className = isError ? "error" : "";
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": state.csrf },
    body: JSON.stringify(body),
    credentials: "same-origin",
  });
  let data = {};
  try { data = await response.json(); } catch (e) { data = {}; }
  if (response.status === 401) { window.location.reload(); }
  if (!response.ok) {
    const reason = data.reason ? " (" + data.reason + ")" : "";
    throw new Error((data.error || "The request failed.") + reason);
  }
  return data;
}

// ------------------------------------------------------------------ rendering

// Characters a reader cannot see or that reorder what they read (controls but tab and newline,
// format characters such as bidi overrides and zero-width ones, separators, non-ASCII spaces,
// private-use, surrogate and unassigned code points), as the server escapes previews.
const HIDDEN = /(?![\t\n])[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]|(?! )\p{Zs}/gu;

function hex(code, width) { return code.toString(16).padStart(width, "0"); }

// Agent text made inert: every hidden character shown as a visible escape and counted on
// `seen` (the card's warning line says how many).
function inert(text, seen) {
  return String(text).replace(HIDDEN, (char) => {
    seen.count += 1;
    const code = char.codePointAt(0);
    if (code < 0x100) return "\\x" + hex(code, 2);
    if (code < 0x10000) return "\\u" + hex(code, 4);
    return "\\U" + hex(code, 8);
  });
}

function escapeWarning(seen) {
  if (!seen.count) return null;
  return el("p", { class: "escape-warning", "data-testid": "escape-warning",
    text: "Warning: " + seen.count + " control or invisible character(s) in the agent's text " +
          "are shown escaped (\\xNN, \\uNNNN); look closely before deciding." });
}

// A unified diff's lines, classed by their position: file headers and hunk headers only
// between hunks, and inside a hunk as many lines as its header counts, each by its first
// character. A content line that reads like a header ("++ x" added) stays content.
function diffClasses(lines) {
  const classes = [];
  let oldLeft = 0;
  let newLeft = 0;
  for (const line of lines) {
    if (oldLeft > 0 || newLeft > 0) {
      const first = line.charAt(0);
      if (first === "+") { classes.push("add"); newLeft -= 1; }
      else if (first === "-") { classes.push("del"); oldLeft -= 1; }
      else if (first === "\\") { classes.push(""); }
      else { classes.push(""); oldLeft -= 1; newLeft -= 1; }
      continue;
    }
    const hunk = /^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/.exec(line);
    if (hunk) {
      oldLeft = hunk[1] === undefined ? 1 : Number(hunk[1]);
      newLeft = hunk[2] === undefined ? 1 : Number(hunk[2]);
      classes.push("hunk");
    } else if (line.startsWith("--- ") || line.startsWith("+++ ")) {
      classes.push("file");
    } else {
      classes.push("");
    }
  }
  return classes;
}

function previewBlock(preview, seen) {
  const pre = el("pre", { class: "preview", "data-testid": "preview",
                          "data-kind": preview.kind });
  const lines = preview.text.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  // The server's own note on what it escaped comes first, before any diff line.
  const noted = lines.length && lines[0].startsWith("[") &&
    lines[0].includes("control or invisible character");
  const body = noted ? lines.slice(1) : lines;
  const classes = preview.kind === "diff" ? diffClasses(body) : body.map(() => "");
  if (noted) pre.append(el("span", { class: "note", "data-testid": "preview-note",
                                     text: inert(lines[0], seen) }));
  // Consecutive lines of one class share a span (a 60 KB preview is a handful of nodes, not
  // thousands); past PREVIEW_LINES the rest waits behind a button.
  const runs = (from, to) => {
    let start = from;
    for (let index = from + 1; index <= to; index += 1) {
      if (index === to || classes[index] !== classes[start]) {
        const text = body.slice(start, index).map((line) => inert(line, seen)).join("\n");
        pre.append(el("span", { class: classes[start], text }));
        start = index;
      }
    }
  };
  const first = Math.min(body.length, PREVIEW_LINES);
  runs(0, first);
  if (body.length > first) {
    const rest = el("button", { type: "button", class: "more-lines", "data-testid": "more-lines",
                                text: "Show the other " + (body.length - first) + " lines" });
    rest.addEventListener("click", () => { rest.remove(); runs(first, body.length); });
    pre.append(rest);
  }
  return pre;
}

function requirementList(call, unmet, seen) {
  const list = el("ul", { class: "requirements" });
  const open = new Set(unmet.map((r) => r.kind + "\u0000" + r.match));
  for (const r of call.requirements) {
    const item = el("li", { class: open.has(r.kind + "\u0000" + r.match) ? "unmet" : "",
                            "data-testid": "requirement",
                            text: inert(r.kind + ": " + r.description, seen) });
    if (r.human_only) item.append(el("span", { class: "human-only",
                                                text: " (only a human, each time)" }));
    list.append(item);
  }
  return list;
}

// What "Approve for session" and "Approve always" save, exactly: the rules sent with them.
function ruleList(candidates, seen) {
  const block = el("div", { class: "rules", "data-testid": "rules" });
  if (!candidates.length) {
    block.append(el("p", { text: "\u201cFor session\u201d and \u201calways\u201d save no rule." }));
    return block;
  }
  block.append(el("p", { text: "\u201cFor session\u201d and \u201calways\u201d save these rules:" }));
  const list = el("ul");
  for (const c of candidates) {
    list.append(el("li", { "data-testid": "rule", "data-match": c.match },
      el("code", { text: inert(c.kind + " " + c.match, seen) }),
      " \u2014 " + inert(c.description, seen)));
  }
  block.append(list);
  return block;
}

function onceOnly(event) {
  return [...event.unmet, ...event.call.requirements].some((r) => r.human_only);
}

function approvalCard(event) {
  const call = event.call;
  const card = el("article", { class: "card", "data-testid": "call",
                               "data-execution-id": call.execution_id,
                               "data-target": event.target });
  const seen = { count: 0 };
  card.append(el("h3", { "data-testid": "summary",
                         text: inert(call.tool_name + " \u2014 " + call.summary, seen) }));
  card.append(el("div", { class: "meta" },
    el("span", { class: "server", "data-testid": "server", text: event.target }),
    inert(" \u00b7 session " + call.session_id + " \u00b7 by " + event.requested_by +
          " \u00b7 workspace " + event.workspace +
          (call.batch_id ? " \u00b7 batch " + call.batch_id : ""), seen) +
    (event.deadline ? " \u00b7 decide by " + clock(event.deadline) : "")));
  card.append(requirementList(call, event.unmet, seen));
  if (!onceOnly(event)) card.append(ruleList(event.candidates || [], seen));
  let waiting = null;
  if (call.preview && event.preview_deferred) {
    // Not kept by the console: fetched now that the card is shown; deciding waits for it.
    waiting = el("pre", { class: "preview", "data-testid": "preview-loading",
                          text: "Loading the preview\u2026" });
    card.append(waiting);
  } else if (call.preview) {
    card.append(previewBlock(call.preview, seen));
  }
  if (call.preview && call.preview.omitted_bytes > 0) {
    card.append(el("p", { class: "omitted", "data-testid": "omitted",
      text: call.preview.omitted_bytes + " more bytes are not shown; deny if you need to see them." }));
  }
  card.append(el("div", { class: "meta", text: "digest " + call.digest }));
  if (event.change_set) card.append(changeSetBlock(event.change_set, seen));
  const warning = escapeWarning(seen);
  if (warning) card.append(warning);
  const note = el("input", { type: "text", placeholder: "note (shown to the agent on deny)",
                             "data-testid": "note", maxlength: "4096" });
  const actions = el("div", { class: "actions" }, note);
  const buttons = [];
  for (const [kind, label, cls] of KIND_LABELS) {
    if (kind !== "once" && onceOnly(event)) continue;
    const button = el("button", { type: "button", class: cls,
                                  "data-testid": "approve-" + kind, text: label });
    button.addEventListener("click", () => decide(event, kind, note.value, buttons));
    buttons.push(button);
  }
  const changes = event.change_set;
  if (changes && !changes.unrepresentable && !changes.failure) {
    const apply = el("button", { type: "button", class: "apply", "data-testid": "apply",
                                 text: "Apply exactly this" });
    apply.addEventListener("click", () => decide(event, "apply", note.value, buttons));
    buttons.push(apply);
  }
  if (event.dry_run_refusal === "") {
    const dry = el("button", { type: "button", "data-testid": "dry-run",
                               text: changes ? "Dry run again" : "Dry run" });
    dry.addEventListener("click", () => dryRun(event, dry));
    buttons.push(dry);
  }
  const deny = el("button", { type: "button", class: "deny", "data-testid": "deny", text: "Deny" });
  deny.addEventListener("click", () => decide(event, "deny", note.value, buttons));
  buttons.push(deny);
  actions.append(...buttons);
  if (waiting) loadPreview(event, card, waiting, seen, buttons);
  const auditButton = el("button", { type: "button", "data-testid": "audit", text: "Audit trail" });
  const audit = el("div", { class: "audit", "data-testid": "audit-trail", hidden: "" });
  auditButton.addEventListener("click", () => showAudit(event.target, call.execution_id, audit));
  actions.append(auditButton);
  card.append(actions, audit);
  return card;
}

// A dry run's change set: each changed path (diffs coloured), the exit code, the ends of the
// output, and why it cannot be applied when it cannot.
function changeSetBlock(changes, seen) {
  const block = el("section", { class: "changes", "data-testid": "change-set" });
  block.append(el("h4", { text: "Dry run (asked by " + inert(changes.requested_by, seen) +
                          "): what the command would change" }));
  if (changes.failure) {
    block.append(el("p", { class: "omitted", "data-testid": "dry-run-failure",
                           text: "It did not complete: " + inert(changes.failure, seen) }));
  }
  if (changes.unrepresentable) {
    block.append(el("p", { class: "omitted", "data-testid": "unrepresentable",
                           text: "Cannot be applied: " + inert(changes.unrepresentable, seen) +
                                 " — approve or deny the command." }));
  }
  if (!changes.changes.length && !changes.unrepresentable) {
    block.append(el("p", { text: "No file in the workspace would change." }));
  }
  for (const c of changes.changes) {
    block.append(el("div", { class: "change", "data-testid": "change", "data-kind": c.kind,
                             "data-path": c.path },
      el("strong", { text: c.kind }), " ", el("code", { text: inert(c.path, seen) })));
    if (c.detail) {
      const kind = c.kind === "modified" || c.kind === "created" ? "diff" : "text";
      block.append(previewBlock({ kind, text: c.detail, omitted_bytes: 0 }, seen));
    }
  }
  if (changes.omitted_changes) {
    block.append(el("p", { class: "omitted",
                           text: changes.omitted_changes + " more changed paths are not shown." }));
  }
  const exit = changes.exit_code === null ? "none (it did not exit)" : String(changes.exit_code);
  block.append(el("p", { "data-testid": "exit-code", text: "Exit code " + exit + "; output:" }));
  const output = changes.output_head +
    (changes.omitted_output_bytes ? "[… " + changes.omitted_output_bytes + " bytes …]\n" : "") +
    changes.output_tail;
  block.append(previewBlock({ kind: "text", text: output, omitted_bytes: 0 }, seen));
  block.append(el("div", { class: "meta", text: "effect " + changes.effect_digest }));
  return block;
}

async function dryRun(event, button) {
  button.disabled = true;
  button.textContent = "Dry run under way…";
  try {
    await post("/api/dry-run", { target: event.target, execution_id: event.call.execution_id,
                                 digest: event.call.digest });
    notice("Dry run done: " + inert(event.call.summary, { count: 0 }) + ".", false);
  } catch (error) {
    notice(error.message, true);
    button.disabled = false;
    button.textContent = "Dry run";
  }
}

async function loadPreview(event, card, waiting, seen, buttons) {
  for (const b of buttons) b.disabled = true;
  const query = new URLSearchParams({ target: event.target, execution_id: event.call.execution_id });
  try {
    const response = await fetch("/api/preview?" + query.toString(), { credentials: "same-origin" });
    const data = await response.json();
    if (!response.ok || data.digest !== event.call.digest || !data.preview) {
      waiting.textContent = (data && data.error) || "The preview is not available; deny if in doubt.";
      return;
    }
    waiting.replaceWith(previewBlock(data.preview, seen));
    card.dataset.previewShown = "yes";
    scheduleRender();  // a batch box holding this card may now be decided
    const warning = escapeWarning(seen);
    const old = card.querySelector("[data-testid=escape-warning]");
    if (warning && old) old.replaceWith(warning);
    else if (warning) card.insertBefore(warning, card.querySelector(".actions"));
    for (const b of buttons) b.disabled = false;
  } catch (error) {
    waiting.textContent = "The preview could not be fetched; deny if in doubt.";
  }
}

function questionCard(event) {
  const card = el("article", { class: "card", "data-testid": "question",
                               "data-execution-id": event.execution_id,
                               "data-target": event.target });
  const seen = { count: 0 };
  card.append(el("h3", { text: "Question" }));
  card.append(el("div", { class: "meta" },
    el("span", { class: "server", "data-testid": "server", text: event.target }),
    inert(" \u00b7 session " + event.session_id + " \u00b7 by " + event.requested_by, seen)));
  card.append(el("p", { "data-testid": "question-text", text: inert(event.question, seen) }));
  const actions = el("div", { class: "actions" });
  for (const choice of event.choices) {
    // The button shows the choice made inert; the answer sent is the choice as offered.
    const button = el("button", { type: "button", "data-testid": "choice",
                                  text: inert(choice, seen) });
    button.addEventListener("click", () => answer(event, choice));
    actions.append(button);
  }
  const free = el("input", { type: "text", placeholder: "your answer", "data-testid": "answer-text" });
  const send = el("button", { type: "button", class: "approve", "data-testid": "answer",
                              text: "Answer" });
  send.addEventListener("click", () => answer(event, free.value));
  actions.append(free, send);
  const warning = escapeWarning(seen);
  if (warning) card.append(warning);
  card.append(actions);
  return card;
}

function render() {
  const main = document.getElementById("pending");
  const groups = [];
  let budget = state.limit;
  let hidden = 0;
  for (const target of state.targets) {
    const mine = [...state.items.values()].filter((e) => e.target === target.name);
    if (!mine.length) continue;
    const group = el("section", { class: "target-group", "data-testid": "target-group",
                                  "data-target": target.name });
    group.append(el("h2", { text: target.name + " (" + target.address + ")" }));
    const batches = new Map();
    for (const event of mine) {
      const batch = batchKey(event);
      if (batch) {
        if (!batches.has(batch)) batches.set(batch, []);
        batches.get(batch).push(event);
      }
    }
    // The members each box shows: those that came in its first SETTLE_MS; later ones stand
    // apart.
    const shown = new Map();
    const now = Date.now();
    for (const [batch, members] of batches) {
      if (members.length < 2 && !state.batchViews.has(batch)) continue;
      if (!state.batchViews.has(batch)) {
        state.batchViews.set(batch, { ids: new Set(), opened: now, changed: now });
      }
      const view = state.batchViews.get(batch);
      for (const member of members) {
        if (!view.ids.has(member.call.execution_id) && now - view.opened < SETTLE_MS) {
          view.ids.add(member.call.execution_id);
          view.changed = now;
        }
      }
      const inView = members.filter((m) => view.ids.has(m.call.execution_id));
      if (inView.length > 1) shown.set(batch, { members: inView, view });
    }
    const placed = new Set();
    for (const event of mine) {
      const id = event.type === "approval" ? event.call.execution_id : event.execution_id;
      const k = key(event.target, id);
      if (placed.has(k)) continue;
      const box = shown.get(batchKey(event));
      const members = box && box.members.includes(event) ? box.members : [event];
      for (const member of members) {
        const mid = member.type === "approval" ? member.call.execution_id : member.execution_id;
        placed.add(key(member.target, mid));
      }
      if (budget <= 0) { hidden += members.length; continue; }
      budget -= 1;
      if (members.length > 1) {
        group.append(batchBox(target.name, event.call.batch_id, members, box.view));
      } else {
        group.append(cardFor(event));
      }
    }
    if (group.childElementCount > 1) groups.push(group);
  }
  const total = state.items.size;
  const head = el("p", { class: "count", "data-testid": "pending-count",
                         text: total + " pending" + (hidden ? ", " + (total - hidden) + " shown" : "") });
  const tail = [];
  if (hidden) {
    const more = el("button", { type: "button", "data-testid": "show-more",
                                text: "Show " + Math.min(PAGE, hidden) + " more of " + hidden });
    more.addEventListener("click", () => { state.limit += PAGE; render(); });
    tail.push(more);
  }
  main.replaceChildren(...(total ? [head] : []), ...groups, ...tail);
  const live = new Set([...state.items.values()].map(batchKey));
  for (const batch of [...state.batchViews.keys()]) {
    if (!live.has(batch)) state.batchViews.delete(batch);
  }
  if (!groups.length) {
    main.append(el("p", { id: "empty", text: "Nothing is waiting for a decision." }));
  }
}

function batchBox(target, batchId, events, view) {
  const box = el("section", { class: "batch", "data-testid": "batch", "data-batch-id": batchId });
  const note = el("input", { type: "text", placeholder: "note for the whole batch",
                             "data-testid": "batch-note" });
  const approve = el("button", { type: "button", class: "approve", "data-testid": "approve-batch",
                                 text: "Approve all " + events.length + " once" });
  const deny = el("button", { type: "button", class: "deny", "data-testid": "deny-batch",
                              text: "Deny all " + events.length });
  const run = async (kind) => {
    approve.disabled = deny.disabled = true;
    try {
      await post("/api/decide-batch", {
        target, kind, note: note.value,
        calls: events.map((e) => ({ execution_id: e.call.execution_id, digest: e.call.digest })),
      });
      notice("Decided the batch " + inert(batchId, { count: 0 }) + " (" + events.length +
             " calls).", false);
    } catch (error) {
      notice(error.message, true);
      approve.disabled = deny.disabled = false;
    }
  };
  approve.addEventListener("click", () => run("once"));
  deny.addEventListener("click", () => run("deny"));
  const settling = SETTLE_MS - (Date.now() - view.changed);
  if (settling > 0) {
    // Changed just now: decided only once it has been on screen as it is.
    approve.disabled = deny.disabled = true;
    box.classList.add("settling");
    setTimeout(render, settling + 10);
  }
  // A member whose preview the console did not keep is approved only once that preview is
  // on screen (with its digest checked), as its own card's buttons are.
  if (events.some((e) => e.preview_deferred && cardFor(e).dataset.previewShown !== "yes")) {
    approve.disabled = true;
    approve.title = "waiting for every call's preview";
  }
  const session = events[0].call.session_id;
  box.append(el("div", { class: "batch-bar" },
    el("strong", { text: "One model turn: batch " + inert(batchId, { count: 0 }) + ", " +
                         events.length + " calls of session " + session }), note, approve, deny));
  for (const event of events) box.append(cardFor(event));
  return box;
}

function renderTargets() {
  const list = document.getElementById("targets");
  list.replaceChildren(...state.targets.map((t) => {
    const status = state.status.get(t.name) || { status: t.status || "", detail: t.detail || "" };
    return el("li", { class: status.status, "data-testid": "target-status",
                      "data-target": t.name, title: status.detail || status.status,
                      text: t.name + (status.status ? ": " + status.status : "") });
  }));
}

// ------------------------------------------------------------------ actions

async function decide(event, kind, note, buttons) {
  for (const b of buttons) b.disabled = true;
  try {
    const remembered = kind === "session" || kind === "always";
    const rules = remembered
      ? (event.candidates || []).map((c) => ({ kind: c.kind, match: c.match })) : [];
    const effect = kind === "apply" ? event.change_set.effect_digest : "";
    await post("/api/decide", { target: event.target, execution_id: event.call.execution_id,
                                digest: event.call.digest, kind, note, rules,
                                effect_digest: effect });
    notice((kind === "deny" ? "Denied " : "Approved ") + inert(event.call.summary, { count: 0 }) +
           " on " + event.target + ".", false);
  } catch (error) {
    notice(error.message, true);
    for (const b of buttons) b.disabled = false;
  }
}

async function answer(event, text) {
  try {
    await post("/api/answer", { target: event.target, execution_id: event.execution_id,
                                answer: text });
    notice("Answered the question on " + event.target + ".", false);
  } catch (error) {
    notice(error.message, true);
  }
}

async function showAudit(target, executionId, node) {
  const query = new URLSearchParams({ target, execution_id: executionId });
  const response = await fetch("/api/audit?" + query.toString(), { credentials: "same-origin" });
  const data = await response.json();
  node.hidden = false;
  if (!response.ok) { node.textContent = data.error || "The audit trail is not available."; return; }
  // A timeline: when, what, who, and the few fields that say the most; the record in full
  // one click away.
  const seen = { count: 0 };
  const list = el("ol", { class: "timeline", "data-testid": "timeline" });
  for (const e of data.events) {
    const said = ["tool", "decided_by", "reason", "state", "error_code", "exit_code"]
      .filter((name) => e.data && e.data[name] !== undefined && e.data[name] !== "")
      .map((name) => name + " " + e.data[name]).join(" \u00b7 ");
    const raw = el("details", {}, el("summary", { text: "record" }),
                   el("pre", { text: inert(JSON.stringify(e.data, null, 1), seen) }));
    list.append(el("li", { "data-testid": "timeline-entry" },
      el("time", { text: clock(e.time) }), " ",
      el("strong", { text: inert(e.kind, seen) }),
      inert((e.principal ? " by " + e.principal : "") + (said ? " \u2014 " + said : ""), seen),
      raw));
  }
  node.replaceChildren(list);
}

function renderRecent() {
  const section = document.getElementById("recent");
  const list = document.getElementById("recent-list");
  section.hidden = !state.recent.length;
  list.replaceChildren(...state.recent.map((r) => {
    const seen = { count: 0 };
    const who = r.decided_by ? r.decided_by : "nobody";
    return el("li", { "data-testid": "recent-call", "data-state": r.state },
      el("time", { text: clock(r.time) }), " ",
      el("strong", { text: inert(r.summary, seen) }),
      inert(" \u2014 " + r.state.toLowerCase() + " \u00b7 decided by " + who +
            (r.reason ? " \u00b7 " + r.reason : "") + " \u00b7 " + r.target, seen));
  }));
}

// ------------------------------------------------------------------ events

function handle(event) {
  if (event.type === "target") {
    state.status.set(event.target, { status: event.status, detail: event.detail });
    renderTargets();
    return;
  }
  if (event.type === "resolved") {
    const k = key(event.target, event.execution_id);
    const was = state.items.get(k);
    if (was) {
      const summary = was.type === "approval"
        ? was.call.tool_name + " \u2014 " + was.call.summary : "question: " + was.question;
      state.recent.unshift({ target: event.target, summary, state: event.state,
                             decided_by: event.decided_by || "", reason: event.reason || "",
                             time: Date.now() });
      state.recent.length = Math.min(state.recent.length, RECENT);
      renderRecent();
    }
    state.items.delete(k);
    state.cards.delete(k);
  } else {
    const id = event.type === "approval" ? event.call.execution_id : event.execution_id;
    const k = key(event.target, id);
    state.items.set(k, event);
    state.cards.delete(k);  // built again, from this event, when it is shown
  }
  scheduleRender();
}

async function start() {
  const response = await fetch("/api/session", { credentials: "same-origin" });
  if (response.status === 401) { window.location.reload(); return; }
  const session = await response.json();
  state.csrf = session.csrf;
  state.targets = session.targets;
  renderTargets();
  document.getElementById("logout").addEventListener("click", async () => {
    try { await post("/logout", {}); } finally { window.location.reload(); }
  });
  const source = new EventSource("/api/events");
  source.addEventListener("open", () => {
    // A (re)connection starts with a full snapshot: forget what was shown.
    state.items.clear();
    state.cards.clear();
    render();
  });
  source.addEventListener("message", (message) => handle(JSON.parse(message.data)));
}

document.addEventListener("DOMContentLoaded", start);
