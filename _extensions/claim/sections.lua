-- Blocks that depend on the campaign, shared by `quarto render` and offload-lab's own pandoc build:
--   ::: {.requires experiments="context boots"}   kept when every experiment named has an ok run; otherwise only its
--                                                 first heading stays, followed by a visible note
--   ::: {.only-campaign kind="embedded"}          kept only for that kind of campaign (or campaign="NAME")
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

local function requires(div)
  local missing = {}
  for _, exp in ipairs(words(div.attributes["experiments"])) do
    if not (state.runs and state.runs[exp]) then table.insert(missing, exp) end
  end
  if #missing == 0 then return div.content end
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

local function Div(div)
  local is_req, is_only = div.classes:includes("requires"), div.classes:includes("only-campaign")
  if not (is_req or is_only) then return nil end
  if not state then return pandoc.Para({ cf.marker("sections", "claim-unknown") }) end
  if is_req then return requires(div) end
  return only_campaign(div)
end

return {
  { Meta = function(meta) state = cf.load(meta) end },
  { Div = Div },
}
