-- Blocks that depend on the campaign, shared by `quarto render` and offload-lab's own pandoc build:
--   ::: {.requires experiments="context boots"}   kept when every experiment named has an ok run; otherwise only its
--                                                 first heading stays, followed by a visible note (note="none":
--                                                 dropped silently, for a remark rather than a section)
--   ::: {.only-campaign kind="embedded"}          kept only for that kind of campaign (or campaign="NAME")
--   ::: {.choose}                                 holds .requires blocks; the first whose experiments all have a run
--                                                 is kept, the others dropped; when none has, the first one leaves
--                                                 its heading and note (a measured variant, then a published one)
--   ::: {.when claim="NAME" equals="TEXT"}        kept when the claim resolved and printed exactly TEXT
--                                                 (not="TEXT": printed anything else; neither: resolved at all), so
--                                                 that prose which depends on a result is chosen by the data;
--                                                 [words]{.when claim=... equals=...} does the same inline
--   ::: {.hand-runs}                              a paragraph naming the runs made by hand this build reads, if any
-- Quarto documents quarto.utils.resolve_path for files next to an extension's script; plain pandoc has
-- PANDOC_SCRIPT_FILE.
local function beside(file)
  if quarto and quarto.utils and quarto.utils.resolve_path then return quarto.utils.resolve_path(file) end
  local here = PANDOC_SCRIPT_FILE and PANDOC_SCRIPT_FILE:match("^(.*)[/\\]") or "."
  return here .. "/" .. file
end
local cf = dofile(beside("claims-file.lua"))
local state, meta_ = nil, nil

local function words(s)
  local out = {}
  for w in (s or ""):gmatch("[^%s,]+") do table.insert(out, w) end
  return out
end

local function note(text)
  return pandoc.Div({ pandoc.Para({ pandoc.Emph(pandoc.Inlines(text)) }) }, pandoc.Attr("", { "section-absent" }))
end

local function missing_of(div)
  local missing = {}
  for _, exp in ipairs(words(div.attributes["experiments"])) do
    if not (state.runs and state.runs[exp]) then table.insert(missing, exp) end
  end
  return missing
end

local function requires(div)
  local missing = missing_of(div)
  if #missing == 0 then return div.content end
  if div.attributes["note"] == "none" then return {} end  -- a remark that needs no note when it does not apply
  local kept = pandoc.Blocks({})
  if div.content[1] and div.content[1].t == "Header" then kept:insert(div.content[1]) end
  -- No campaign name or count in the note: the audit would rightly see any digit in it as an unbacked number.
  kept:insert(note("Left out: this campaign has no finished run of the " .. table.concat(missing, ", ") ..
    " experiment, so this part has nothing to report yet."))
  return kept
end

local function only_campaign(div)
  local kind, name = div.attributes["kind"], div.attributes["campaign"]
  if (kind and kind ~= state.kind) or (name and name ~= state.campaign) then return {} end
  return div.content
end

local function when(div)  -- a Div or a Span
  local name = div.attributes["claim"] or ""
  local c = state.claims and state.claims[name]
  if not c then
    local m = cf.marker(name, "claim-unknown")
    return div.t == "Span" and m or pandoc.Para({ m })
  end
  local text = c.status == "ok" and c.text or nil
  local keep
  if text == nil then
    keep = false
  elseif div.attributes["equals"] then
    keep = text == div.attributes["equals"]
  elseif div.attributes["not"] then
    keep = text ~= div.attributes["not"]
  else
    keep = true
  end
  if keep then return div.content end
  return {}
end

-- ::: {.hand-runs} (in Limits): kept only when the build reads runs made by hand, which it then names. No server
-- address or run id in the text (the audit sees their digits as unbacked numbers): claims.json holds both.
local function hand_runs(div)
  local names = {}
  for exp, _ in pairs(state.hand_runs or {}) do table.insert(names, exp) end
  if #names == 0 then return {} end
  table.sort(names)
  local blocks = pandoc.Blocks({ pandoc.Para(pandoc.Inlines(
    "Not every figure comes from the campaign's sessions: this build was asked to read runs made by hand "
    .. "(a notebook run outside the campaign runner), for the " .. table.concat(names, ", ")
    .. " experiment" .. (#names > 1 and "s" or "") .. ". Each figure they feed is marked \"by hand\" where it is "
    .. "printed and links its own executed notebook; such a run may have measured another server than the "
    .. "campaign's boots, so a comparison between its figures and the campaign's is one across servers. The "
    .. "server each ran against is recorded in the claims file written beside this paper.")) })
  blocks:extend(div.content)
  return blocks
end

-- ::: {.generated file="_generated/NAME"} (empty): the file that `offload-lab paper prepare` wrote, read in place of
-- the div. An include cannot do this: Quarto expands includes while it lists the project's inputs, before the
-- pre-render hook has written them (quarto-cli issue 12491). quarto.utils.string_to_blocks reads it as Quarto reads
-- the document (shortcodes, callouts, cross-reference labels). offload-lab's pandoc build inlines these files before
-- pandoc runs (offload_lab.paper.qmd GENERATED_DIV), so this pass meets none there.
local function generated_path(file)
  local rel = file:gsub("^_generated[/\\]", "")
  local claims = os.getenv("OFFLOAD_LAB_CLAIMS")
  if rel ~= file and claims and claims ~= "" then return pandoc.path.join({ pandoc.path.directory(claims), rel }) end
  local input = quarto and quarto.doc and quarto.doc.input_file
  if input then return pandoc.path.join({ pandoc.path.directory(input), file }) end
  return file
end

local function Generated(div)
  if not div.classes:includes("generated") then return nil end
  local path = generated_path(div.attributes["file"] or "")
  local f = io.open(path, "r")
  if not f or not (quarto and quarto.utils and quarto.utils.string_to_blocks) then
    if f then f:close() end
    cf.warn("cannot read generated file " .. path .. "; run `offload-lab paper prepare` first")
    return pandoc.Para({ cf.marker("generated", "claim-unknown") })
  end
  local text = f:read("a")
  f:close()
  return quarto.utils.string_to_blocks(text)
end

-- First pass: pick one variant of each .choose (inner ones first), leaving it a .requires block for the second.
local function Choose(div)
  if not div.classes:includes("choose") then return nil end
  if not state then return pandoc.Para({ cf.marker("sections", "claim-unknown") }) end
  local first = nil
  for _, b in ipairs(div.content) do
    if b.t == "Div" and b.classes:includes("requires") then
      first = first or b
      if #missing_of(b) == 0 then return b end
    end
  end
  return first or {}
end

local function Div(div)
  local is_req, is_only, is_when = div.classes:includes("requires"), div.classes:includes("only-campaign"),
    div.classes:includes("when")
  if not (is_req or is_only or is_when or div.classes:includes("hand-runs")) then return nil end
  if not state then return pandoc.Para({ cf.marker("sections", "claim-unknown") }) end
  if div.classes:includes("hand-runs") then return hand_runs(div) end
  if is_req then return requires(div) end
  if is_when then return when(div) end
  return only_campaign(div)
end

local function Span(span)
  if not span.classes:includes("when") then return nil end
  if not state then return cf.marker("sections", "claim-unknown") end
  return when(span)
end

-- @sec-x as offload-lab's pandoc build prints it (offload_lab.paper.pandoc_ast resolve_crossrefs): with sections
-- unnumbered, the section's title, linked; a section the sources define but this build left out, its title and
-- "(left out of this build)". Quarto's own crossref would print "?@sec-x" for the second and, for Typst, fail on
-- the first ("cannot reference heading without numbering"). `paper prepare` writes the titles and whether sections
-- are numbered beside claims.json (xref.json); with numbered sections Quarto's "Section N" stands.
local function read_json(name)
  if not state then return nil end
  local f = io.open(pandoc.path.join({ pandoc.path.directory(cf.path(meta_)), name }), "r")
  if not f then return nil end
  local ok, data = pcall(pandoc.json.decode, f:read("a"), false)
  f:close()
  return ok and type(data) == "table" and data or nil
end

local function cap(text, id)
  if id:sub(1, 1):match("%u") then return text:sub(1, 1):upper() .. text:sub(2) end
  return text
end

local function SectionRefs(doc)
  local xref = read_json("xref.json")
  if not xref then return nil end
  local present = {}
  doc.blocks:walk({ Header = function(h)
    if h.identifier:match("^sec%-") then present[h.identifier] = pandoc.utils.stringify(h.content) end
  end })
  local known = xref.sections or {}
  return doc:walk({ Cite = function(cite)
    local out = pandoc.Inlines({})
    for n, c in ipairs(cite.citations) do
      local id = c.id
      local key = id:sub(1, 1):lower() .. id:sub(2)
      if not key:match("^sec%-") then return nil end
      if n > 1 then out:extend({ pandoc.Str(","), pandoc.Space() }) end
      if present[key] and xref.numbered ~= true then
        out:insert(pandoc.Link(pandoc.Inlines(cap(present[key], id)), "#" .. key, "", pandoc.Attr("", { "crossref" })))
      elseif not present[key] and type(known[key]) == "string" then
        out:insert(pandoc.Span(pandoc.Inlines(cap(known[key], id) .. " (left out of this build)"),
          pandoc.Attr("", { "crossref-absent" }, { { "data-label", key } })))
      else
        return nil
      end
    end
    return out
  end })
end

return {
  { Div = Generated },
  { Meta = function(meta) meta_ = meta; state = cf.load(meta) end },
  { Div = Choose },
  { Div = Div, Span = Span },
  { Pandoc = SectionRefs },
}
