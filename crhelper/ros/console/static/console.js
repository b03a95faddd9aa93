/* The local ROS console: a small single-page app over /console/api/ (no framework, no build step).
 *
 * Views by URL hash: #/ stacks, #/create, #/stacks/ID[/TAB], #/stacks/ID/update.
 * Live: each view long-polls its JSON (the server answers at once on a change, else within ~1 s),
 * falling back to a 500 ms poll; nothing reloads the page.
 * All text from the server goes in through textContent, never parsed as markup.
 */
(function () {
  "use strict";

  var TOKEN_KEY = "crhelper-console-token:" + location.port;
  var POLL_MS = 500;
  var MIN_GAP_MS = 100;
  var token = null;
  var generation = 0;         // bumped on every navigation: a stale view's loops stop themselves
  var main = document.getElementById("main");
  var errorBox = document.getElementById("error");

  // ---- small DOM helpers ------------------------------------------------------------------

  function h(tag, attrs) {
    var el = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (key) {
        var value = attrs[key];
        if (value === null || value === undefined || value === false) return;
        if (key === "text") el.textContent = value;
        else if (key === "on") Object.keys(value).forEach(function (ev) { el.addEventListener(ev, value[ev]); });
        else if (key === "className") el.className = value;
        else el.setAttribute(key, value === true ? "" : String(value));
      });
    }
    for (var i = 2; i < arguments.length; i++) append(el, arguments[i]);
    return el;
  }

  function append(el, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(el, c); }); return; }
    el.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }

  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); }

  function replace(el) {
    clear(el);
    for (var i = 1; i < arguments.length; i++) append(el, arguments[i]);
  }

  function statusClass(status) {
    status = status || "";
    if (/FAILED$/.test(status)) return "status failed";
    if (/ROLLBACK_COMPLETE$/.test(status)) return "status failed";
    if (/IN_PROGRESS$/.test(status)) return "status progress";
    if (/^DELETE_COMPLETE$/.test(status)) return "status deleted";
    if (/COMPLETE$/.test(status)) return "status complete";
    return "status";
  }

  function badge(status, id) {
    return h("span", { className: statusClass(status), id: id, "data-status": status || "", text: status || "—" });
  }

  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

  function utc(time) { return time ? time.replace("T", " ") + " UTC" : ""; }

  function inProgress(status) { return /IN_PROGRESS$/.test(status || ""); }

  // ---- errors -----------------------------------------------------------------------------

  function describe(error) {
    if (error && error.Code) return error.Code + ": " + (error.Message || "");
    return "ConsoleUnavailable: " + (error && error.message ? error.message : String(error)) +
      " (is `crhelper ros serve` still running?)";
  }

  var liveBadge = document.getElementById("live");

  function showError(error) {
    errorBox.textContent = describe(error);
    errorBox.hidden = false;
    if (!(error && error.Code)) { liveBadge.textContent = "offline"; liveBadge.className = "live offline"; }
  }

  function clearError() {
    errorBox.hidden = true; errorBox.textContent = "";
    liveBadge.textContent = "live"; liveBadge.className = "live";
  }

  // ---- the API ----------------------------------------------------------------------------

  function api(method, path, body) {
    var init = { method: method, credentials: "same-origin", cache: "no-store",
                 headers: { "X-Console-Token": token || "" } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch("/console/api/" + path, init).then(function (response) {
      return response.text().then(function (text) {
        var data;
        try { data = text ? JSON.parse(text) : {}; }
        catch (e) { data = { Code: "InvalidResponse", Message: "HTTP " + response.status + " " + text.slice(0, 200) }; }
        if (!response.ok) {
          if (!data.Code) data = { Code: "HTTP" + response.status, Message: text.slice(0, 200) };
          throw data;
        }
        return data;
      });
    });
  }

  function obtainToken() {
    var params = new URLSearchParams(location.search);
    var offered = params.get("token");
    if (offered) {
      sessionStorage.setItem(TOKEN_KEY, offered);
      // Keep the token out of the address bar, history and bookmarks.
      history.replaceState(null, "", location.pathname + location.hash);
      return Promise.resolve(offered);
    }
    var kept = sessionStorage.getItem(TOKEN_KEY);
    if (kept) return Promise.resolve(kept);
    return api("GET", "session").then(function (data) {
      sessionStorage.setItem(TOKEN_KEY, data.Token);
      return data.Token;
    });
  }

  // A loop that fetches `fetchOnce(state)` and renders it, again and again, until the view changes.
  function live(fetchOnce, render) {
    var mine = generation;
    var state = {};
    function step() {
      if (mine !== generation) return;
      var started = Date.now();
      fetchOnce(state).then(function (data) {
        if (mine !== generation) return;
        clearError();
        var again = render(data, state);
        if (again === false) return;
        // A long poll waits on the server for news: ask again soon (at most ~10 a second while
        // a busy operation changes things); a plain poll keeps POLL_MS.
        var waited = Date.now() - started;
        setTimeout(step, Math.max(0, (state.longPoll ? MIN_GAP_MS : POLL_MS) - waited));
      }, function (error) {
        if (mine !== generation) return;
        showError(error);
        setTimeout(step, 2000);
      });
    }
    step();
  }

  // ---- stacks list ------------------------------------------------------------------------

  function viewStacks() {
    var body = h("tbody", { id: "stack-rows" });
    var empty = h("p", { className: "muted", id: "no-stacks", hidden: true },
      "No stacks yet. ", h("a", { href: "#/create", text: "Create one" }), " from a template file.");
    replace(main,
      h("div", { className: "pagehead" },
        h("h1", { text: "Stacks" }),
        h("a", { className: "button primary", href: "#/create", id: "create-button", text: "Create stack" })),
      h("table", { className: "grid", id: "stacks" },
        h("thead", null, h("tr", null, ["Stack name", "Status", "Status reason", "Created", "Updated"].map(function (t) {
          return h("th", { text: t });
        }))),
        body),
      empty);
    live(function (state) {
      return api("GET", "stacks" + (state.version != null ? "?since=" + state.version : ""));
    }, function (data, state) {
      state.version = data.Version; state.longPoll = data.Version != null;
      var key = JSON.stringify(data.Stacks);
      if (key === state.drawn) return;
      state.drawn = key;
      clear(body);
      data.Stacks.forEach(function (s) {
        body.appendChild(h("tr", { "data-stack-name": s.StackName, "data-stack-id": s.StackId },
          h("td", null, h("a", { href: "#/stacks/" + encodeURIComponent(s.StackId), className: "stack-link", text: s.StackName })),
          h("td", null, badge(s.Status)),
          h("td", { className: "reason", text: s.StatusReason || "" }),
          h("td", { text: utc(s.CreateTime) }),
          h("td", { text: utc(s.UpdateTime) })));
      });
      empty.hidden = data.Stacks.length > 0;
    });
  }

  // ---- template file and parameters form -------------------------------------------------

  function readFile(input) {
    var file = input.files && input.files[0];
    if (!file) return Promise.reject({ Code: "InvalidParameter", Message: "TemplateBody: choose a template file" });
    return file.text();
  }

  // Builds the parameter inputs from ValidateTemplate's Parameters; `current` holds a stack's values.
  function parameterFields(container, parameters, current, updating) {
    clear(container);
    var inputs = {};
    if (!parameters.length) container.appendChild(h("p", { className: "muted", text: "This template has no parameters." }));
    parameters.forEach(function (p) {
      var key = p.ParameterKey;
      var id = "param-" + key;
      var value = current && Object.prototype.hasOwnProperty.call(current, key) ? current[key]
        : (p.DefaultValue !== undefined ? p.DefaultValue : "");
      var input;
      if (p.AllowedValues && p.AllowedValues.length) {
        input = h("select", { id: id, name: key }, p.AllowedValues.map(function (v) {
          return h("option", { value: v, selected: String(v) === String(value), text: v });
        }));
      } else {
        var masked = p.NoEcho === true || p.NoEcho === "true";
        input = h("input", { id: id, name: key, type: masked ? "password" : "text", autocomplete: "off",
                             spellcheck: "false" });
        // A NoEcho value is never shown: empty means "keep" on update, "the default" on create.
        input.value = masked ? "" : value;
        if (masked) input.placeholder = updating ? "unchanged (NoEcho)" : (p.DefaultValue !== undefined ? "default (NoEcho)" : "");
      }
      inputs[key] = { input: input, spec: p };
      container.appendChild(h("div", { className: "field" },
        h("label", { "for": id }, h("span", { className: "key", text: p.Label && p.Label !== key ? p.Label + " (" + key + ")" : key }),
          h("span", { className: "type", text: p.Type || "" })),
        input,
        p.Description ? h("div", { className: "hint", text: p.Description }) : null));
    });
    return inputs;
  }

  function collect(inputs, updating) {
    var out = {};
    Object.keys(inputs).forEach(function (key) {
      var item = inputs[key];
      var value = item.input.value;
      var masked = item.spec.NoEcho === true || item.spec.NoEcho === "true";
      if (masked && value === "") return;          // keep the previous / default value
      if (!updating && value === "" && item.spec.DefaultValue !== undefined) return;
      out[key] = value;
    });
    return out;
  }

  function formError(box, error) { box.textContent = describe(error); box.hidden = false; }

  // ---- create -----------------------------------------------------------------------------

  function viewCreate() {
    var file = h("input", { type: "file", id: "template-file", accept: ".yaml,.yml,.json,.template,.txt" });
    var name = h("input", { type: "text", id: "stack-name", autocomplete: "off", spellcheck: "false",
                            placeholder: "my-stack", required: true });
    var rollback = h("input", { type: "checkbox", id: "disable-rollback" });
    var timeout = h("input", { type: "number", id: "timeout-minutes", min: 10, max: 1440, placeholder: "60" });
    var params = h("div", { id: "parameters" }, h("p", { className: "muted", text: "Choose a template file to see its parameters." }));
    var summary = h("p", { className: "muted", id: "template-summary" });
    var problem = h("div", { className: "form-error", id: "form-error", role: "alert", hidden: true });
    var submit = h("button", { type: "submit", className: "button primary", id: "submit-create", disabled: true, text: "Create" });
    var inputs = null;
    var template = null;

    file.addEventListener("change", function () {
      problem.hidden = true; inputs = null; submit.disabled = true;
      readFile(file).then(function (text) {
        template = text;
        return api("POST", "validate", { TemplateBody: text });
      }).then(function (answer) {
        summary.textContent = (answer.Description ? answer.Description + " · " : "") +
          plural((answer.Resources || []).length, "resource") + ", " + plural((answer.Outputs || []).length, "output");
        inputs = parameterFields(params, answer.Parameters || [], null, false);
        submit.disabled = false;
      }, function (error) { formError(problem, error); });
    });

    var form = h("form", { id: "create-form", className: "panel", on: { submit: function (event) {
      event.preventDefault();
      problem.hidden = true;
      if (!inputs) { formError(problem, { Code: "InvalidParameter", Message: "TemplateBody: choose a template file" }); return; }
      submit.disabled = true;
      api("POST", "stacks", { StackName: name.value.trim(), TemplateBody: template, Parameters: collect(inputs, false),
                              DisableRollback: rollback.checked, TimeoutInMinutes: timeout.value || null })
        .then(function (answer) { location.hash = "#/stacks/" + encodeURIComponent(answer.StackId); },
              function (error) { submit.disabled = false; formError(problem, error); });
    } } },
      h("div", { className: "field" }, h("label", { "for": "template-file", text: "Template file (YAML or JSON)" }), file, summary),
      h("div", { className: "field" }, h("label", { "for": "stack-name", text: "Stack name" }), name),
      h("fieldset", null, h("legend", { text: "Parameters" }), params),
      h("fieldset", null, h("legend", { text: "Options" }),
        h("div", { className: "field inline" }, rollback, h("label", { "for": "disable-rollback", text: "Disable rollback on failure" })),
        h("div", { className: "field" }, h("label", { "for": "timeout-minutes", text: "Timeout (minutes)" }), timeout)),
      problem,
      h("div", { className: "actions" }, submit, h("a", { className: "button", href: "#/", text: "Cancel" })));
    replace(main, h("div", { className: "pagehead" }, h("h1", { text: "Create stack" })), form);
  }

  // ---- update -----------------------------------------------------------------------------

  function viewUpdate(stackId) {
    var mine = generation;
    var file = h("input", { type: "file", id: "template-file", accept: ".yaml,.yml,.json,.template,.txt" });
    var params = h("div", { id: "parameters" }, h("p", { className: "muted", text: "Loading…" }));
    var problem = h("div", { className: "form-error", id: "form-error", role: "alert", hidden: true });
    var submit = h("button", { type: "submit", className: "button primary", id: "submit-update", disabled: true, text: "Update" });
    var title = h("h1", { text: "Update stack" });
    var inputs = null;
    var newTemplate = null;
    var current = {};

    function load(text) {
      return api("POST", "validate", { TemplateBody: text }).then(function (answer) {
        if (mine !== generation) return;
        inputs = parameterFields(params, answer.Parameters || [], current, true);
        submit.disabled = false;
      });
    }

    api("GET", "stacks/" + encodeURIComponent(stackId)).then(function (data) {
      title.textContent = "Update stack " + data.Stack.StackName;
      (data.Stack.Parameters || []).forEach(function (p) {
        if (p.ParameterKey.indexOf("ALIYUN::") !== 0) current[p.ParameterKey] = p.ParameterValue;
      });
      return api("GET", "stacks/" + encodeURIComponent(stackId) + "/template");
    }).then(function (data) { return load(data.TemplateBody); }).catch(function (error) { formError(problem, error); });

    file.addEventListener("change", function () {
      problem.hidden = true; submit.disabled = true;
      readFile(file).then(function (text) { newTemplate = text; return load(text); })
        .catch(function (error) { formError(problem, error); });
    });

    var form = h("form", { id: "update-form", className: "panel", on: { submit: function (event) {
      event.preventDefault();
      problem.hidden = true; submit.disabled = true;
      api("POST", "stacks/" + encodeURIComponent(stackId) + "/update",
          { TemplateBody: newTemplate, Parameters: collect(inputs, true), UsePreviousParameters: true })
        .then(function () { location.hash = "#/stacks/" + encodeURIComponent(stackId) + "/events"; },
              function (error) { submit.disabled = false; formError(problem, error); });
    } } },
      h("div", { className: "field" }, h("label", { "for": "template-file", text: "New template file (optional: keep the current one)" }), file),
      h("fieldset", null, h("legend", { text: "Parameters (NoEcho ones left empty keep their value)" }), params),
      problem,
      h("div", { className: "actions" }, submit,
        h("a", { className: "button", href: "#/stacks/" + encodeURIComponent(stackId), text: "Cancel" })));
    replace(main, h("div", { className: "pagehead" }, title), form);
  }

  // ---- one stack --------------------------------------------------------------------------

  // What each tab draws, so a poll reads only that (each part is a read of the stack).
  var TAB_PARTS = { overview: "resources,events,dependencies", resources: "resources", events: "events",
                    graph: "resources,dependencies", outputs: "stack", parameters: "stack", template: "stack" };
  var TABS = [["overview", "Overview"], ["resources", "Resources"], ["events", "Events"], ["outputs", "Outputs"],
              ["parameters", "Parameters"], ["graph", "Graph"], ["template", "Template"]];

  function viewStack(stackId, tab) {
    tab = TAB_PARTS[tab] ? tab : "overview";
    var base = "#/stacks/" + encodeURIComponent(stackId);
    var nameEl = h("h1", { id: "stack-name", text: stackId });
    var statusEl = h("span", { id: "stack-status-holder" });
    var reasonEl = h("p", { className: "reason", id: "stack-reason" });
    var problem = h("div", { className: "form-error", id: "action-error", role: "alert", hidden: true });
    var deletePanel = h("div", { className: "panel confirm", id: "delete-panel", hidden: true });
    var content = h("section", { id: "tab-" + tab, className: "tab" });
    var logPanel = h("div", { className: "panel logs", id: "logs-panel", hidden: true });
    var events = [];
    var lastData = null;
    var logsFor = null;
    var mine = generation;

    var buttons = h("div", { className: "actions" },
      h("a", { className: "button", id: "update-button", href: base + "/update", text: "Update" }),
      h("button", { type: "button", className: "button danger", id: "delete-button", text: "Delete",
                    on: { click: function () { openDelete(); } } }));

    replace(main,
      h("div", { className: "pagehead" }, h("div", null, nameEl, statusEl, reasonEl), buttons),
      problem, deletePanel,
      h("nav", { className: "tabs" }, TABS.map(function (t) {
        return h("a", { href: base + "/" + t[0], id: "tab-link-" + t[0], className: t[0] === tab ? "active" : "", text: t[1] });
      })),
      content, logPanel);

    function openDelete() {
      if (lastData && lastData.Resources) return confirmDelete(lastData.Resources);
      api("GET", "stacks/" + encodeURIComponent(stackId) + "/resources").then(function (data) {
        confirmDelete(data.Resources);
      }, function (error) { formError(problem, error); });
    }

    function confirmDelete(resources) {
      var retainAll = h("input", { type: "checkbox", id: "retain-all" });
      var boxes = resources.map(function (r) {
        return { id: r.LogicalResourceId, box: h("input", { type: "checkbox", id: "retain-" + r.LogicalResourceId }) };
      });
      replace(deletePanel,
        h("p", null, "Delete stack ", h("strong", { text: lastData ? lastData.Stack.StackName : stackId }),
          " and its resources? Resources checked below are kept (not sent a Delete request)."),
        h("div", { className: "field inline" }, retainAll, h("label", { "for": "retain-all", text: "Retain all resources" })),
        boxes.map(function (b) {
          return h("div", { className: "field inline" }, b.box, h("label", { "for": "retain-" + b.id, text: "Retain " + b.id }));
        }),
        h("div", { className: "actions" },
          h("button", { type: "button", className: "button danger", id: "confirm-delete", text: "Delete stack", on: { click: function () {
            problem.hidden = true;
            var retain = boxes.filter(function (b) { return b.box.checked; }).map(function (b) { return b.id; });
            api("POST", "stacks/" + encodeURIComponent(stackId) + "/delete",
                { RetainAllResources: retainAll.checked, RetainResources: retain.length ? retain : null })
              .then(function () { deletePanel.hidden = true; if (tab !== "events") location.hash = base + "/events"; },
                    function (error) { formError(problem, error); });
          } } }),
          h("button", { type: "button", className: "button", id: "cancel-delete", text: "Cancel",
                        on: { click: function () { deletePanel.hidden = true; } } })));
      deletePanel.hidden = false;
    }

    function showLogs(logicalId) {
      logsFor = logicalId;
      logPanel.hidden = false;
      var pre = h("pre", { id: "logs", text: "Loading…" });
      replace(logPanel, h("div", { className: "pagehead" }, h("h2", { text: "Provider logs · " + logicalId }),
        h("button", { type: "button", className: "button", id: "close-logs", text: "Close",
                      on: { click: function () { logsFor = null; logPanel.hidden = true; } } })), pre);
      (function poll() {
        if (mine !== generation || logsFor !== logicalId) return;
        api("GET", "stacks/" + encodeURIComponent(stackId) + "/resources/" + encodeURIComponent(logicalId) + "/logs")
          .then(function (data) {
            pre.textContent = data.Lines.length ? data.Lines.join("\n") : "(this resource's provider has written no log lines)";
            setTimeout(poll, 1000);
          }, function (error) { pre.textContent = describe(error); setTimeout(poll, 2000); });
      })();
    }

    function render(data) {
      var s = data.Stack;
      nameEl.textContent = s.StackName;
      replace(statusEl, badge(s.Status, "stack-status"));
      reasonEl.textContent = s.StatusReason || "";
      document.title = s.StackName + " · Local ROS console";
      var renderers = { overview: renderOverview, resources: renderResources, events: renderEvents,
                        outputs: renderOutputs, parameters: renderParameters, graph: renderGraph, template: null };
      if (renderers[tab]) renderers[tab](data);
    }

    function kv(rows) {
      return h("table", { className: "kv" }, h("tbody", null, rows.map(function (r) {
        return h("tr", null, h("th", { text: r[0] }), h("td", { id: r[2] || null, text: r[1] === undefined ? "" : String(r[1]) }));
      })));
    }

    function renderOverview(data) {
      var s = data.Stack;
      replace(content, h("div", { className: "columns" }, h("div", null,
        h("div", { className: "panel" }, h("h2", { text: "Stack information" }), kv([
          ["Stack ID", s.StackId, "info-stack-id"], ["Stack name", s.StackName], ["Status", s.Status, "info-status"],
          ["Status reason", s.StatusReason], ["Region", s.RegionId], ["Description", s.Description],
          ["Created", utc(s.CreateTime)], ["Updated", utc(s.UpdateTime)],
          ["Rollback disabled", s.DisableRollback ? "yes" : "no"], ["Timeout (minutes)", s.TimeoutInMinutes]])),
        h("div", { className: "panel" }, h("h2", { text: "Outputs" }), outputsTable(s.Outputs || []))), h("div", null,
        h("div", { className: "panel graph" }, h("h2", { text: "Dependency graph" }),
          drawGraph(data.Dependencies || {}, data.Resources || [])),
        h("div", { className: "panel" }, h("h2", { text: "Latest events" }), timeline(events.slice(-6))))));
    }

    function outputsTable(outputs) {
      if (!outputs.length) return h("p", { className: "muted", id: "no-outputs", text: inProgress(lastData && lastData.Stack.Status)
        ? "Outputs appear when the operation completes." : "No outputs." });
      return h("table", { className: "grid", id: "outputs" },
        h("thead", null, h("tr", null, h("th", { text: "Key" }), h("th", { text: "Value" }), h("th", { text: "Description" }))),
        h("tbody", null, outputs.map(function (o) {
          var value = typeof o.OutputValue === "string" ? o.OutputValue : JSON.stringify(o.OutputValue);
          return h("tr", { "data-output-key": o.OutputKey }, h("td", { text: o.OutputKey }),
            h("td", { className: "mono output-value", id: "output-" + o.OutputKey, text: value }),
            h("td", { text: o.Description || "" }));
        })));
    }

    function renderOutputs(data) { replace(content, h("div", { className: "panel" }, outputsTable(data.Stack.Outputs || []))); }

    function renderParameters(data) {
      replace(content, h("div", { className: "panel" }, h("table", { className: "grid", id: "parameters-table" },
        h("thead", null, h("tr", null, h("th", { text: "Key" }), h("th", { text: "Value" }))),
        h("tbody", null, (data.Stack.Parameters || []).map(function (p) {
          return h("tr", null, h("td", { text: p.ParameterKey }),
            h("td", { className: "mono", id: "parameter-" + p.ParameterKey, text: p.ParameterValue }));
        })))));
    }

    function renderResources(data) {
      replace(content, h("div", { className: "panel" }, h("table", { className: "grid", id: "resources" },
        h("thead", null, h("tr", null, ["Logical ID", "Physical ID", "Type", "Status", "Status reason", "Updated", ""].map(function (t) {
          return h("th", { text: t });
        }))),
        h("tbody", null, data.Resources.map(function (r) {
          return h("tr", { "data-logical-id": r.LogicalResourceId },
            h("td", { text: r.LogicalResourceId }), h("td", { className: "mono", text: r.PhysicalResourceId }),
            h("td", { text: r.ResourceType }), h("td", null, badge(r.Status)),
            h("td", { className: "reason", text: r.StatusReason || "" }), h("td", { text: utc(r.UpdateTime) }),
            h("td", null, h("button", { type: "button", className: "button small", id: "logs-" + r.LogicalResourceId,
              text: "Provider logs", on: { click: function () { showLogs(r.LogicalResourceId); } } })));
        })))));
    }

    function timeline(list) {
      if (!list.length) return h("p", { className: "muted", text: "No events yet." });
      return h("ol", { className: "timeline" }, list.slice().reverse().map(function (e) {
        return h("li", { className: "event", "data-event-id": e.EventId, "data-logical-id": e.LogicalResourceId,
                         "data-status": e.Status },
          h("span", { className: "when", text: utc(e.CreateTime) }),
          h("span", { className: "what" }, h("strong", { text: e.LogicalResourceId }), " ",
            h("span", { className: "type", text: e.ResourceType })),
          badge(e.Status),
          e.StatusReason ? h("span", { className: "reason", text: e.StatusReason }) : null);
      }));
    }

    function renderEvents() {
      replace(content, h("div", { className: "panel" }, h("h2", { text: "Events (" + events.length + ")" }),
        h("div", { id: "events" }, timeline(events))));
    }

    function renderGraph(data) {
      var svg = drawGraph(data.Dependencies || {}, data.Resources || []);
      replace(content, h("div", { className: "panel graph" }, svg,
        h("p", { className: "muted", text: "An arrow points from a resource to one that depends on it (created after it)." })));
    }

    live(function (state) {
      var query = "?include=" + TAB_PARTS[tab] + "&events=" + events.length +
        (state.version != null ? "&since=" + state.version : "");
      return api("GET", "stacks/" + encodeURIComponent(stackId) + "/view" + query);
    }, function (data, state) {
      state.version = data.Version; state.longPoll = data.Version != null;
      if (data.EventsReset) events = [];
      if (data.Events) events = events.concat(data.Events);
      lastData = data;
      // Redraw only on a change: a button under the pointer stays the same element.
      var key = JSON.stringify([data.Stack, data.Resources, events.length, data.Dependencies]);
      if (key !== state.drawn) { state.drawn = key; render(data); }
    });

    if (tab === "template") {
      api("GET", "stacks/" + encodeURIComponent(stackId) + "/template").then(function (data) {
        replace(content, h("div", { className: "panel" }, h("pre", { id: "template", className: "template", text: data.TemplateBody })));
      }, showError);
    }
  }

  // ---- the dependency graph (layered layout, drawn as SVG) --------------------------------

  var SVG = "http://www.w3.org/2000/svg";

  function s(tag, attrs, text) {
    var el = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { el.setAttribute(k, String(attrs[k])); });
    if (text !== undefined) el.textContent = text;
    return el;
  }

  // Layer = 1 + the deepest layer among what a resource depends on; within a layer, resources sit
  // near the average position of their dependencies (one barycentre pass), which keeps edges short.
  function layout(deps, perRow) {
    var names = Object.keys(deps);
    var needed = {};
    names.forEach(function (n) { (deps[n] || []).forEach(function (d) { needed[d] = true; }); });
    var layer = {};
    function depth(name, seen) {
      if (layer[name] !== undefined) return layer[name];
      if (seen[name]) return 0;             // a cycle (ROS refuses them; draw rather than hang)
      seen[name] = true;
      var d = 0;
      (deps[name] || []).forEach(function (dep) { if (deps[dep] !== undefined) d = Math.max(d, depth(dep, seen) + 1); });
      layer[name] = d;
      return d;
    }
    names.forEach(function (n) { depth(n, {}); });
    var layers = [];
    names.forEach(function (n) { (layers[layer[n]] = layers[layer[n]] || []).push(n); });
    var position = {};
    layers.forEach(function (row, index) {
      if (index > 0) {
        row.sort(function (a, b) { return centre(a) - centre(b) || (a < b ? -1 : 1); });
      } else row.sort();
      if (row.length > perRow) {
        // It will wrap: what others depend on goes last (the row nearest its dependents).
        var kept = row.filter(function (n) { return !needed[n]; }).concat(row.filter(function (n) { return needed[n]; }));
        row.splice.apply(row, [0, row.length].concat(kept));
      }
      // Position = slot from the centre of the drawn row (rows are drawn centred, wide ones wrapped from the end).
      row.forEach(function (n, i) {
        var fromEnd = row.length - 1 - i;
        var rowLength = Math.min(perRow, row.length - Math.floor(fromEnd / perRow) * perRow);
        var column = rowLength - 1 - (fromEnd % perRow);
        position[n] = column - (rowLength - 1) / 2;
      });
    });
    function centre(name) {
      var parents = (deps[name] || []).filter(function (d) { return position[d] !== undefined; });
      if (!parents.length) return 0;
      return parents.reduce(function (sum, d) { return sum + position[d]; }, 0) / parents.length;
    }
    return { layers: layers, layer: layer, position: position };
  }

  function drawGraph(deps, resources) {
    var byId = {};
    resources.forEach(function (r) { byId[r.LogicalResourceId] = r; });
    var W = 210, H = 48, GX = 36, GY = 56, PAD = 16, PER_ROW = 5;
    var shape = layout(deps, PER_ROW);
    // A wide layer wraps onto several rows (resources of one layer never depend on each other).
    var rows = [];
    shape.layers.forEach(function (layer) {
      // A wide layer wraps from its end, so the last row (next to the dependents) is full.
      var wrapped = [];
      for (var end = layer.length; end > 0; end -= PER_ROW) wrapped.unshift(layer.slice(Math.max(0, end - PER_ROW), end));
      rows = rows.concat(wrapped);
    });
    var widest = rows.reduce(function (m, row) { return Math.max(m, row.length); }, 0);
    var width = Math.max(1, widest) * (W + GX) - GX + 2 * PAD;
    var height = Math.max(1, rows.length) * (H + GY) - GY + 2 * PAD;
    var svg = s("svg", { id: "graph", width: width, height: height, viewBox: "0 0 " + width + " " + height,
                         role: "img", "aria-label": "Dependency graph" });
    var defs = s("defs");
    var marker = s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7,
                               orient: "auto-start-reverse" });
    marker.appendChild(s("path", { d: "M 0 0 L 10 5 L 0 10 z", "class": "arrowhead" }));
    defs.appendChild(marker);
    svg.appendChild(defs);
    var at = {};
    rows.forEach(function (row, li) {
      var offset = (width - 2 * PAD - (row.length * (W + GX) - GX)) / 2;
      row.forEach(function (name, i) {
        at[name] = { x: PAD + offset + i * (W + GX), y: PAD + li * (H + GY) };
      });
    });
    Object.keys(deps).forEach(function (name) {
      (deps[name] || []).forEach(function (dep) {
        if (!at[dep] || !at[name]) return;
        var a = at[dep], b = at[name];
        var x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y;
        var my = (y1 + y2) / 2;
        svg.appendChild(s("path", { d: "M " + x1 + " " + y1 + " C " + x1 + " " + my + ", " + x2 + " " + my + ", " + x2 + " " + y2,
                                    "class": "edge", "marker-end": "url(#arrow)", "data-from": dep, "data-to": name }));
      });
    });
    Object.keys(at).forEach(function (name) {
      var r = byId[name] || {};
      var g = s("g", { "class": "node " + statusClass(r.Status).replace("status", "").trim(), "data-logical-id": name,
                       transform: "translate(" + at[name].x + "," + at[name].y + ")" });
      g.appendChild(s("title", {}, name + " · " + (r.ResourceType || "") + " · " + (r.Status || "")));
      g.appendChild(s("rect", { width: W, height: H, rx: 6, ry: 6 }));
      g.appendChild(s("text", { x: 10, y: 20, "class": "name" }, clip(name, 24)));
      g.appendChild(s("text", { x: 10, y: 38, "class": "sub" }, clip(r.ResourceType || "", 30)));
      svg.appendChild(g);
    });
    return svg;
  }

  function clip(text, n) { return text.length > n ? text.slice(0, n - 1) + "…" : text; }

  // ---- routing ----------------------------------------------------------------------------

  function route() {
    generation += 1;
    clearError();
    var parts;
    try { parts = (location.hash.replace(/^#\/?/, "") || "").split("/").map(decodeURIComponent); }
    catch (e) { parts = []; }
    document.title = "Local ROS console";
    if (parts[0] === "create") return viewCreate();
    if (parts[0] === "stacks" && parts[1]) {
      if (parts[2] === "update") return viewUpdate(parts[1]);
      return viewStack(parts[1], parts[2]);
    }
    return viewStacks();
  }

  obtainToken().then(function (t) {
    token = t;
    window.addEventListener("hashchange", route);
    route();
  }, function (error) {
    showError(error);
    replace(main, h("p", { text: "Open the console with the URL `crhelper ros serve` printed (it ends with ?token=…)." }));
  });
})();
