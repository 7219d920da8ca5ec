# imas.mk — IMAS: the probe and selector shim (libimas.so), and the commands
# imas and imasd (made by tools/tools.mk).  Included by the top Makefile.
#
# libimas.so is never built with the sanitizers even when SANITIZE=1: it is
# LD_PRELOADed into ordinary programs, where an ASan runtime cannot come first.

IMAS_SRC    := $(sort $(wildcard src/imas/*.c))
IMAS_HDR    := $(wildcard src/imas/*.h)
IMAS_CFLAGS := $(filter-out -fsanitize=% -fno-sanitize-recover=%,$(CFLAGS))

.PHONY: imas
all: imas
imas: $(BUILD)/libimas.so $(BUILD)/bin/imas $(BUILD)/bin/imasd

$(BUILD)/libimas.so: $(IMAS_SRC) $(IMAS_HDR) src/imas/imas.mk
	@mkdir -p $(dir $@)
	$(CC) $(IMAS_CFLAGS) -shared -o $@ $(IMAS_SRC) -ldl -pthread

# make install: the systemd user unit, pointing at the installed imasd.
.PHONY: install-imas
install: install-imas
install-imas: all
	install -d "$(DESTDIR)$(PREFIX)/lib/systemd/user"
	sed -e 's|@IMASD@|$(PREFIX)/bin/imasd|g' tools/slabkit/imas/imasd.service \
	    > "$(DESTDIR)$(PREFIX)/lib/systemd/user/imasd.service"
