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
-- Quarto documents quarto.utils.resolve_path for files next to an extension's script; plain pandoc has
-- PANDOC_SCRIPT_FILE.
local function beside(file)
  if quarto and quarto.utils and quarto.utils.resolve_path then return quarto.utils.resolve_path(file) end
  local here = PANDOC_SCRIPT_FILE and PANDOC_SCRIPT_FILE:match("^(.*)[/\\]") or "."
  return here .. "/" .. file
end
local cf = dofile(beside("claims-file.lua"))
local state = nil

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
  if not (is_req or is_only or is_when) then return nil end
  if not state then return pandoc.Para({ cf.marker("sections", "claim-unknown") }) end
  if is_req then return requires(div) end
  if is_when then return when(div) end
  return only_campaign(div)
end

local function Span(span)
  if not span.classes:includes("when") then return nil end
  if not state then return cf.marker("sections", "claim-unknown") end
  return when(span)
end

return {
  { Meta = function(meta) state = cf.load(meta) end },
  { Div = Choose },
  { Div = Div, Span = Span },
}
