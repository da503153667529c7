-- {{< claim NAME >}}: the printed text of a claim from claims.json, with its provenance.
-- HTML: a link to the data file, titled with the file and its sha256, then a small link to the notebook that wrote
-- it. Other formats: the text in a span. A table claim (kind "table") returns its pipe table as blocks.
-- Quarto documents quarto.utils.resolve_path for files next to an extension's script; plain pandoc has
-- PANDOC_SCRIPT_FILE.
local function beside(file)
  if quarto and quarto.utils and quarto.utils.resolve_path then return quarto.utils.resolve_path(file) end
  local here = PANDOC_SCRIPT_FILE and PANDOC_SCRIPT_FILE:match("^(.*)[/\\]") or "."
  return here .. "/" .. file
end
local cf = dofile(beside("claims-file.lua"))
local data = nil

local function is_html()
  if quarto and quarto.doc and quarto.doc.is_format then return quarto.doc.is_format("html") end
  return FORMAT and FORMAT:match("html") ~= nil
end

local function claim(args, kwargs, meta)
  if data == nil then data = cf.load(meta) or false end
  local name = pandoc.utils.stringify(args[1] or "")
  local c = data and data.claims and data.claims[name]
  if not c then
    cf.warn("unknown claim " .. name)
    return cf.marker(name, "claim-unknown")
  end
  if c.status ~= "ok" then
    return cf.marker(name, "claim-absent")
  end
  local f = c.files[1]
  -- JSON null decodes to a userdata, not nil: take a notebook only when it is a string.
  local function str(v) if type(v) == "string" then return v end end
  -- A hand run links its own executed notebook or none: the campaign's template did not write its data.
  local nb = str(c.notebook_output) or (not c.by_hand and str(c.notebook)) or nil
  local title = name .. ": " .. f.path .. " sha256 " .. f.sha256
  if nb then title = title .. "; written by " .. nb end
  if c.kind == "table" then
    -- A table claim stands alone in its paragraph; Quarto replaces the paragraph with the blocks returned.
    local blocks = pandoc.read(c.text, "markdown").blocks
    if is_html() then
      blocks = blocks:walk({ Str = function(s)
        if s.text:match("%d") then
          return pandoc.Link(s.text, cf.href(meta, f.path), title, pandoc.Attr("", { "claim" }, { { "data-claim", name } }))
        end
      end })
    end
    return blocks
  end
  local text = pandoc.Inlines(c.text)
  -- Read from a run made by hand, admitted because the user asked (paper.selection): said beside the figure.
  local hand = c.by_hand == true and pandoc.Span(pandoc.Inlines(" (by hand)"), pandoc.Attr("", { "claim-hand" },
    { { "title", "from a run made by hand, outside the campaign's sessions; see Limits" } })) or nil
  if is_html() then
    local link = pandoc.Link(text, cf.href(meta, f.path), title, pandoc.Attr("", { "claim" }, { { "data-claim", name } }))
    if not nb then return hand and pandoc.Inlines({ link, hand }) or link end
    -- The producing notebook: an empty link after the number, which paper.css draws as a small "nb"
    -- (a ::after mark, so that copied text holds the number alone).
    local mark = pandoc.Link({}, cf.href(meta, nb), "notebook " .. nb,
      pandoc.Attr("", { "claim-nb" }, { { "aria-label", "notebook" } }))
    return pandoc.Inlines(hand and { link, mark, hand } or { link, mark })
  end
  local span = pandoc.Span(text, pandoc.Attr("", { "claim" }, { { "data-claim", name }, { "title", title } }))
  return hand and pandoc.Inlines({ span, hand }) or span
end

return { ["claim"] = claim }
